"""The verdict's other axes: the depth verdict and the experts verdict joined to the width verdict.

Stage: judge (after the width verdict, :func:`coordcheck.judge.verdict.judge`). Input: the width verdict, the frame,
the rules and the jobs' facts. Output: the same verdict with ``depth`` / ``experts`` set where the frame sweeps that
axis, its overall status the worse of them, and ``width_status`` ``not judged (one width)`` (:data:`NOT_JUDGED`) where
only the other axis was swept (the verdict is passed in: this module is below the width verdict's, which calls it).
Never imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from coordcheck.judge.depth import judge_depth
from coordcheck.judge.experts import judge_experts
from coordcheck.judge.rules import RANK, Rules

__all__ = ["NOT_JUDGED", "add_depth", "add_experts"]

NOT_JUDGED = "not judged (one width)"


def _join(verdict: Any, other: Any, name: str, first: bool) -> None:
    """Combine the verdict of another axis (``name``: depth, experts) with the width verdict; ``first``: no other
    axis joined before it (then, at one width, it decides)."""
    c = verdict.configs
    if not verdict.width_status:
        one_width = c.empty or bool((c["n_widths"] <= 1).all())
        width_fails = not c.empty and bool((c["status"] == "fail").any())
        verdict.width_status = NOT_JUDGED if one_width and not width_fails else verdict.status
    if verdict.width_status == NOT_JUDGED and first:
        verdict.status, verdict.reason = other.status, other.reason
    elif RANK[other.status] > RANK[verdict.status]:
        verdict.status, verdict.reason = other.status, f"{name}: {other.reason}"
    elif verdict.status == "pass":
        verdict.reason = f"{verdict.reason}; {name}: {other.reason}"
    verdict.notes = [*verdict.notes, *other.notes]


def add_depth(verdict: Any, frame: pd.DataFrame, rules: Rules, facts: Sequence[Mapping[str, Any]]) -> None:
    """Rule 12: a frame run at several depths gets the depth verdict too (:mod:`coordcheck.judge.depth`), and the
    overall status combines both. A pure depth sweep (one width per depth) has its width invariance ``not judged (one
    width)`` — not "inconclusive: only 1 width" — unless a depth failed there (divergence, the model's audit): the
    depth verdict decides. A width x depth grid must pass both (the width verdict per depth, the depth verdict per
    width). A pure width sweep is left as it was."""
    depth = judge_depth(frame, rules, facts)
    if depth.judged:
        verdict.depth = depth
        _join(verdict, depth, "depth", first=True)


def add_experts(verdict: Any, frame: pd.DataFrame, rules: Rules, facts: Sequence[Mapping[str, Any]]) -> None:
    """Rule 13: a frame run at several numbers of experts gets the experts verdict too
    (:mod:`coordcheck.judge.experts`), combined as the depth verdict is (:func:`add_depth`): at one width it decides,
    with several it must pass too."""
    experts = judge_experts(frame, rules, facts)
    if experts.judged:
        verdict.experts = experts
        _join(verdict, experts, "experts", first=verdict.depth is None)
