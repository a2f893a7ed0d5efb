"""coordcheck: muP coordinate checks with a numeric verdict.

The public API (``__all__``) is re-exported lazily from the stage modules, so that the
analysis side (``coordcheck.report``, ``coordcheck.sweep``) never imports torch.
"""

from __future__ import annotations

from importlib import import_module

from coordcheck.errors import CoordCheckError

__all__ = ["coord_check", "CoordCheckResult", "CoordCheckError", "GradFlowProbe", "gradflow_once", "diagnose",
           "transfer", "TransferResult", "CAUSE_TENSORS", "DepthScaling", "judge_depth"]
__version__ = "0.1.0"

_LAZY = {
    "coord_check": "coordcheck.api",
    "CoordCheckResult": "coordcheck.api",
    "GradFlowProbe": "coordcheck.gradflow",
    "gradflow_once": "coordcheck.gradflow",
    "diagnose": "coordcheck.gradflow",
    "transfer": "coordcheck.transfer.api",  # the subpackage coordcheck.transfer is callable too: the same function
    "TransferResult": "coordcheck.transfer.api",
    "DepthScaling": "coordcheck.depth",  # depth_scaling=DepthScaling("mine", 0.75) in coord_check
    "judge_depth": "coordcheck.depth_verdict",
    "CAUSE_TENSORS": "coordcheck.frame",  # tensors=CAUSE_TENSORS: record what the causes need (in, own)
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'coordcheck' has no attribute {name!r}")
