"""Kept for old imports: the gradient-flow analysis now lives in the package :mod:`coordcheck.gradflow`.

Stage: none of its own. Input: ``import coordcheck.gradflow_report`` in a user's script. Output: the
same names, re-exported from ``coordcheck.gradflow``'s schema, checks, report and plot modules
(never torch). New code imports from ``coordcheck.gradflow``.
"""

from __future__ import annotations

from coordcheck.gradflow import checks, plot, report, schema
from coordcheck.gradflow.checks import *  # noqa: F401,F403
from coordcheck.gradflow.plot import *  # noqa: F401,F403
from coordcheck.gradflow.report import *  # noqa: F401,F403
from coordcheck.gradflow.schema import *  # noqa: F401,F403

__all__ = [*schema.__all__, *checks.__all__, *report.__all__, *plot.__all__]
