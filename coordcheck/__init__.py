"""coordcheck: muP coordinate checks with a numeric verdict.

The public API (``__all__``) is re-exported lazily from the stage packages, so that the
analysis side (``coordcheck.judge``, ``coordcheck.report``) never imports torch. The stages, bottom to top:
``core`` (errors, the frame's schema), ``setup`` (what is trained), ``record`` (the probes), ``run`` (the training
loop, the sweep on disk), ``judge`` (slopes, rules, verdict, causes), ``plot`` and ``report`` (what is shown), ``app``
(the Hydra app, its configuration, the Python API); beside them ``gradflow``, ``transfer``, ``loggers``, ``testing``.
"""

from __future__ import annotations

import types
from importlib import import_module

from coordcheck.core import moved
from coordcheck.core.errors import CoordCheckError

moved.install()  # the flat modules' old paths (coordcheck.verdict, ...) still import, with a DeprecationWarning

__all__ = ["coord_check", "CoordCheckResult", "CoordCheckError", "GradFlowProbe", "gradflow_once", "diagnose",
           "transfer", "TransferResult", "CAUSE_TENSORS", "DepthScaling", "judge_depth", "record"]
__version__ = "0.1.0"

_LAZY = {
    "coord_check": "coordcheck.app.api",
    "CoordCheckResult": "coordcheck.app.api",
    "GradFlowProbe": "coordcheck.gradflow",
    "gradflow_once": "coordcheck.gradflow",
    "diagnose": "coordcheck.gradflow",
    "transfer": "coordcheck.transfer.api",  # the subpackage coordcheck.transfer is callable too: the same function
    "TransferResult": "coordcheck.transfer.api",
    "DepthScaling": "coordcheck.setup.depth",  # depth_scaling=DepthScaling("mine", 0.75) in coord_check
    "judge_depth": "coordcheck.judge.depth",
    "CAUSE_TENSORS": "coordcheck.core.frame",  # tensors=CAUSE_TENSORS: record what the causes need (in, own)
}


class _Recorder(types.ModuleType):
    """The class of the package :mod:`coordcheck.record`: ``coordcheck.record(model, width=..., out=...)`` is the
    recorder for any training loop, :func:`coordcheck.run.recorder.record` (loaded when called), whether
    ``coordcheck.record`` names the package (imported by any stage) or the function."""

    def __call__(self, model, /, **kwargs):
        return import_module("coordcheck.run.recorder").record(model, **kwargs)


import_module("coordcheck.record").__class__ = _Recorder  # the package is a docstring: nothing heavy is imported


def __getattr__(name: str):
    if name == "record":
        return import_module("coordcheck.record")
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'coordcheck' has no attribute {name!r}")
