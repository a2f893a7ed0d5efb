"""μTransfer: does the learning rate tuned at a narrow width hold at a wide one?

``python -m coordcheck.transfer --multirun`` sweeps (width x learning rate x parametrization), one
Hydra job each (``coordcheck.transfer.app``); ``coordcheck.transfer(build, widths, lrs, ...)`` runs
the same grid in-process (``coordcheck.transfer.api``). Both fit the optimum learning rate per
width, its shift per width doubling and a verdict (``coordcheck.transfer.fit``), and write
``transfer.md`` / ``transfer.json`` and the paper figure (``coordcheck.transfer.report``).

Modules: ``frame`` (the loss frame's schema), ``train`` (the engine), ``axes`` (the curve families
of each axis; no torch), ``fit`` (optima, shift; no torch), ``verdict`` (statuses, rules, the
verdict; no torch; ``fit`` re-exports its names), ``report`` and ``plot`` (no torch), ``app``
(Hydra), ``api``.

This package is itself callable — ``coordcheck.transfer(...)`` is :func:`coordcheck.transfer.api.transfer`
whether ``coordcheck.transfer`` names the function or this package — and loads torch only when called.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module

__all__ = ["transfer", "TransferResult", "TransferRules", "TransferVerdict"]

_LAZY = {"transfer": "coordcheck.transfer.api", "TransferResult": "coordcheck.transfer.api",
         "TransferRules": "coordcheck.transfer.verdict", "TransferVerdict": "coordcheck.transfer.verdict"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'coordcheck.transfer' has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    """``import coordcheck; coordcheck.transfer(build, ...)`` works once this package is imported too."""

    def __call__(self, *args, **kwargs):
        return import_module("coordcheck.transfer.api").transfer(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
