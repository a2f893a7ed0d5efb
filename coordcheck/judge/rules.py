"""The verdict's rules: the numbers it judges with (:class:`Rules`, every one a knob) and the statuses it gives.

Stage: judge (below the verdict, the audit and the depth verdict, which all read it). Input: none. Output: the
:class:`Rules` knobs (``report.tol`` in a sweep, ``--tol`` in the report CLI), the statuses and their severity.
Never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordcheck.core.errors import check_knobs, knob
from coordcheck.core.frame import STATS

__all__ = ["Rules", "STATUSES", "RANK", "EXPECT"]


STATUSES = ("pass", "fail", "inconclusive", "zero", "skip", "transient")
RANK = {"pass": 0, "zero": 0, "skip": 0, "transient": 0, "inconclusive": 1, "fail": 2}  # a status's severity


@dataclass(frozen=True)
class Rules:
    """The numbers behind the verdict; every one can be overridden (sweep: ``report.tol``; CLI: ``--tol``), and each
    is checked against its range when set (:func:`coordcheck.core.errors.check_knobs`)."""

    stat: str = knob("std", choices=STATS,
                     help="statistic judged: std (activation std) or l1 (mean |x|, as the mup package)")
    tol: float = knob(0.2, (">", 0), help="max growth slope d log2(stat) / d log2(width) (and half-band of flat "
                                          "series)")
    shrink_tol: float = knob(0.35, (">", 0), help="max shrink slope for series that must not vanish (hidden out, "
                                                  "every delta)")
    rise: float = knob(0.5, (">=", 0), help="instability: loss above (1 + rise) x its running minimum ...")
    rise_floor: float = knob(0.1, (">=", 0), help="... and above it by more than this fraction of the step-0 loss")
    min_widths: int = knob(3, (">=", 2), help="fewer widths than this is inconclusive")
    min_depths: int = knob(3, (">=", 2), help="fewer depths than this is inconclusive (the depth verdict)")
    depth_loss_tol: float = knob(0.05, (">=", 0), help="depth verdict: max rise of the last judged loss from the "
                                                       "shallowest to the deepest depth, as a fraction of the step-0 "
                                                       "loss (deeper must not be worse)")
    min_window: int = knob(2, (">=", 1), help="updated steps the stable window must hold, else inconclusive")
    persist: int = knob(2, (">=", 1), help="a violation after updates must last this many consecutive judged "
                                           "steps ...")
    gross: float = knob(0.4, (">=", 0), help="... unless its whole interval lies more than this beyond the band")

    def __post_init__(self) -> None:
        check_knobs(self)


# (role, tensor) -> rule. "flat": [-shrink_tol, tol]; "no_growth": (-inf, tol].
EXPECT = {
    ("input", "out"): "flat", ("hidden", "out"): "flat", ("norm", "out"): "flat",
    ("output", "out"): "no_growth", ("attention", "out"): "no_growth",
    ("input", "delta"): "flat", ("hidden", "delta"): "flat", ("norm", "delta"): "flat",
    ("output", "delta"): "flat", ("attention", "delta"): "no_growth",
}
