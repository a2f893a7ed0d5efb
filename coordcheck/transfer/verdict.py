"""The μTransfer verdict: its statuses, its rules' numbers, and why a shift does or does not transfer.

Stage: analysis (the μTransfer twin of ``coordcheck.judge.verdict``; never imports torch). Input: the optima and shift
tables of :mod:`coordcheck.transfer.fit` (``fit_optima``, ``fit_shifts``), the jobs that left no frame and the jobs'
facts. Output: a :class:`TransferVerdict` — per parametrization a status (``transfers`` / ``does not transfer`` /
``inconclusive``) and a reason in words (rules 3 and 5 of :mod:`coordcheck.transfer.fit`: no optimum, the shift's
interval against ±``tol``, the widths that built the same model, and across depth deeper is not worse), and the
sweep's from the parametrizations under test — with :class:`TransferRules`, the numbers both the fit and the
verdict read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from statistics import NormalDist

import numpy as np
import pandas as pd

from coordcheck.core.errors import CoordCheckError, check_knobs, knob
from coordcheck.record.shapes import shapes_by_config, width_problem
from coordcheck.transfer.axes import AXIS_WORDS, _select, axis_keys

__all__ = ["TransferRules", "TransferVerdict", "judge_transfer", "across", "TRANSFERS", "DOES_NOT", "INCONCLUSIVE",
           "STATUSES", "CONTROL", "PAR_ORDER"]

TRANSFERS, DOES_NOT, INCONCLUSIVE = "transfers", "does not transfer", "inconclusive"
STATUSES = (TRANSFERS, DOES_NOT, INCONCLUSIVE)
CONTROL = "sp"  # swept beside another parametrization, standard parametrization is the control
PAR_ORDER = ("mup", "none", CONTROL)  # reports and figures: muP first, the control last


@dataclass(frozen=True)
class TransferRules:
    """The verdict's numbers.

    ``tol``: the largest shift of the optimum, in octaves of learning rate per width doubling,
    that still transfers. Set from the ground truth in docs/transfer.md: a muP GPT shifts +0.14, the
    same model in standard parametrization -1.04; half an octave per doubling sits between them
    with room for noise either way, and a 4x wider model then moves its optimum by at most one
    octave (one grid step).
    """

    tol: float = knob(0.5, (">", 0), help="largest |shift| of the optimum that transfers, octaves of lr per width "
                                          "doubling")
    min_points: int = knob(3, (">=", 3), help="finite learning rates a width needs for an optimum (a parabola "
                                              "needs 3)")
    min_widths: int = knob(2, (">=", 2), help="widths with an optimum the shift needs")
    level: float = knob(0.95, (">", 0), ("<", 1), help="confidence level of the intervals of the optimum and the shift")

    def __post_init__(self) -> None:
        check_knobs(self)

    @property
    def z(self) -> float:
        return NormalDist().inv_cdf(0.5 + self.level / 2)


def _octaves(x: float) -> str:
    return f"{x:+.2f}"


NOUNS = {"experts": "expert count"}  # an axis value in words, where its column name is not one


def _why_no_optimum(o: pd.Series, axis: str = "width") -> str:
    who, best = f"{NOUNS.get(axis, axis)} {int(o[axis])}", math.log2(o["best_lr"]) if o["best_lr"] > 0 else math.nan
    if o["edge"] == "flat":
        return (f"{who}'s losses around its best learning rate 2^{best:g} do not fit a parabola with its "
                f"vertex among them (flat or irregular): add seeds or steps")
    if o["edge"] == "few":
        if o["n_finite"] == o["n_lrs"]:
            return (f"{who} has {int(o['n_lrs'])} learning rate(s), fewer than min_points: sweep more, one per "
                    f"octave around the expected optimum")
        return (f"{who} has {int(o['n_finite'])} finite points of {int(o['n_lrs'])} (the others diverged): "
                f"widen the grid towards smaller learning rates")
    if o["edge"] == "low":
        return (f"{who}'s best learning rate 2^{best:g} is the grid's smallest: extend the grid to smaller "
                f"learning rates (add {2 ** (best - 1):.3g}, {2 ** (best - 2):.3g})")
    if o["edge"] == "high":
        return (f"{who}'s best learning rate 2^{best:g} is the grid's largest: extend the grid to larger "
                f"learning rates (add {2 ** (best + 1):.3g}, {2 ** (best + 2):.3g})")
    return (f"{who}'s best learning rate 2^{best:g} is next to one that diverged (or is missing): the "
            f"optimum is at the edge of stability, refine the grid around it")


@dataclass
class TransferVerdict:
    """The verdict: ``status`` (transfers / does not transfer / inconclusive), a one-line ``reason``, and per
    parametrization the shift table (``shifts``, with ``status`` and ``reason`` columns)."""

    status: str
    reason: str
    shifts: pd.DataFrame
    rules: TransferRules = field(default_factory=TransferRules)
    axis: str = "width"  # what the optimum is fitted against: width, or depth (its statuses read "... across depth")

    @property
    def transfers(self) -> bool:
        return self.status == TRANSFERS

    @property
    def label(self) -> str:
        """The status in words: across depth, ``transfers across depth`` / ``does not transfer across depth``."""
        return across(self.status, self.axis)

    @property
    def title(self) -> str:
        parts = []
        for _, s in self.shifts.iterrows():
            shift = f" (shift {s['shift']:+.2f}/doubling)" if math.isfinite(s["shift"]) else ""
            if self.axis == "depth" and math.isfinite(s.get("loss_slope", math.nan)):
                shift = shift[:-1] + f", best loss {s['loss_slope']:+.3f}/doubling)" if shift else \
                    f" (best loss {s['loss_slope']:+.3f}/doubling)"
            parts.append(f"{s['parametrization']}: {across(s['status'], self.axis)}{shift}")
        if self.axis != "width":
            return f"μTransfer across {AXIS_WORDS[self.axis]}: {self.label.upper()} — " + "; ".join(parts)
        return f"μTransfer {self.status.upper()} — " + "; ".join(parts)


def across(status: str, axis: str) -> str:
    """A status in words for ``axis``: ``transfers across depth``, ``... across the number of experts``; width's and
    ``inconclusive`` as they are."""
    return f"{status} across {AXIS_WORDS[axis]}" if axis != "width" and status != INCONCLUSIVE else status


def _depth_causes(shift: float) -> str:
    if shift < 0:
        return ("residual branches are not scaled by depth^-α: add the branch multiplier (depth_scaling=completep or "
                "depth_mup), or the hidden learning rate is not scaled with depth")
    return "the hidden learning rate is scaled with depth twice (a depth factor by hand on top of depth_scaling)"


def _deeper_worse(s: pd.Series) -> str:
    """Across depth: the reason when the best loss rises with depth beyond its interval (else empty)."""
    if not (math.isfinite(s.get("loss_slope_low", math.nan)) and s["loss_slope_low"] > 0):
        return ""
    return (f"deeper is worse: the best held-out loss rises {s['loss_slope']:+.3f} [{s['loss_slope_low']:+.3f}, "
            f"{s['loss_slope_high']:+.3f}] per depth doubling: {_depth_causes(-1)}")


def _judge_one(s: pd.Series, o: pd.DataFrame, rules: TransferRules, axis: str = "width") -> tuple[str, str]:
    status, reason = _judge_shift(s, o, rules, axis)
    worse = _deeper_worse(s) if axis == "depth" else ""
    if worse and status != DOES_NOT:  # the optimum may look put while the deeper models train worse at it
        return DOES_NOT, worse + (f" (the optimum's shift alone: {status}: {reason})" if reason else "")
    return status, reason


def _judge_shift(s: pd.Series, o: pd.DataFrame, rules: TransferRules, axis: str) -> tuple[str, str]:
    missing = o[~np.isfinite(o["optimum"])]
    if len(missing):
        return INCONCLUSIVE, "; ".join(_why_no_optimum(r, axis) for _, r in missing.iterrows())
    noun = NOUNS.get(axis, axis)
    if s["n_optima"] < rules.min_widths:
        return INCONCLUSIVE, (f"{int(s['n_optima'])} {noun}(s) with an optimum: sweep at least {rules.min_widths} "
                              f"{noun}s")
    shift, lo, hi = s["shift"], s["ci_low"], s["ci_high"]
    interval = f"{_octaves(shift)} [{_octaves(lo)}, {_octaves(hi)}] octaves of lr per {noun} doubling"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return INCONCLUSIVE, (f"optimum shift {_octaves(shift)} per {axis} doubling has no interval (one seed and too "
                              f"few learning rates around an optimum): add seeds or learning rates")
    if -rules.tol <= lo and hi <= rules.tol:
        return TRANSFERS, f"the optimum stays put: shift {interval}, within ±{rules.tol:g}"
    if axis == "experts":
        if not (hi < -rules.tol or lo > rules.tol):
            return INCONCLUSIVE, f"shift {interval} straddles ±{rules.tol:g}: add seeds or steps"
        way = "smaller" if shift < 0 else "larger"
        return DOES_NOT, (f"the optimum moves to {way} learning rates as the number of experts grows: shift "
                          f"{interval} (about experts^{shift:+.1f}): a learning rate or init depends on the count "
                          f"(an expert's lr or a router's scaled with the number of experts, or experts whose size "
                          f"shrinks with it: granularity)")
    if axis == "depth":
        if not (hi < -rules.tol or lo > rules.tol):
            return INCONCLUSIVE, f"shift {interval} straddles ±{rules.tol:g}: add seeds or steps"
        way = "smaller" if shift < 0 else "larger"
        return DOES_NOT, (f"the optimum moves to {way} learning rates as depth grows: shift {interval} (about "
                          f"depth^{shift:+.1f}): {_depth_causes(shift)}")
    if hi < -rules.tol:
        return DOES_NOT, (f"the optimum moves to smaller learning rates as width grows: shift {interval} (about "
                          f"width^{shift:+.1f}): the learning rate is not scaled with width (standard "
                          f"parametrization's -1: use muP's per-layer scaling, e.g. mup.MuAdam)")
    if lo > rules.tol:
        return DOES_NOT, (f"the optimum moves to larger learning rates as width grows: shift {interval} (about "
                          f"width^{shift:+.1f}): the learning rate is scaled with width twice (e.g. a hand-scaled "
                          f"lr inside a Mu* optimizer)")
    return INCONCLUSIVE, f"shift {interval} straddles ±{rules.tol:g}: add seeds or steps"


def judge_transfer(optima: pd.DataFrame, shifts: pd.DataFrame, rules: TransferRules | None = None,
                   problems: Sequence[Any] = (), facts: Sequence[Mapping[str, Any]] = (),
                   axis: str = "width") -> TransferVerdict:
    """The sweep's verdict: each parametrization's status, and the sweep's from those under test.

    ``problems``: the jobs that left no frame (objects with ``job`` and ``error``, as
    ``coordcheck.run.sweep.JobProblem``); any turns ``transfers`` into ``inconclusive`` (a missing point can hide the
    optimum). ``facts``: the jobs' facts (``job.json``, or ``TransferResult.facts``): a parametrization whose widths
    built the same model, or models that
    do not grow, does not transfer (:func:`coordcheck.record.shapes.width_problem`), whatever its optima say.
    ``axis="depth"``: the same rules over the depths of one family at one width (``fit_optima(..., axis="depth")``),
    the causes worded for depth, and one more: deeper is worse (the best loss rises with depth beyond its interval)
    does not transfer across depth, whatever the shift."""
    keys = axis_keys(axis)
    rules = rules or TransferRules()
    if shifts.empty:
        raise CoordCheckError("nothing to judge: the frame has no held-out losses")
    rank = {p: i for i, p in enumerate(PAR_ORDER)}
    shifts = shifts.sort_values("parametrization", key=lambda s: s.map(lambda p: rank.get(p, 1.5)), kind="stable")
    shifts = shifts.reset_index(drop=True)
    judged = [_judge_one(s, _select(optima, keys, [s[k] for k in keys]), rules, axis) for _, s in shifts.iterrows()]
    if axis == "width":
        built = shapes_by_config(facts)  # identical models at every width: the optimum stays put as nothing changed
        judged = [(DOES_NOT, p) if (p := width_problem(built.get(str(s.config_id), {}))) else j
                  for j, (_, s) in zip(judged, shifts.iterrows())]
    shifts["status"] = [j[0] for j in judged]
    shifts["reason"] = [j[1] for j in judged]
    shifts["control"] = (shifts["parametrization"] == CONTROL) & (shifts["parametrization"].nunique() > 1)
    tested = shifts[~shifts["control"]]
    order = {DOES_NOT: 0, INCONCLUSIVE: 1, TRANSFERS: 2}
    worst = tested.iloc[int(np.argmin([order[s] for s in tested["status"]]))]
    status = str(worst["status"])
    reason = f"{worst['parametrization']}{f', width {worst.width}' if axis != 'width' else ''}: {worst['reason']}"
    control = shifts[shifts["control"]]
    for _, c in control.iterrows():
        if c["status"] == TRANSFERS:
            reason += f" (note: the sp control transfers too, shift {_octaves(c['shift'])}: the grid may be too " \
                      f"coarse or the run too short to tell them apart)"
    if problems and status == TRANSFERS:
        status = INCONCLUSIVE
        reason = (f"{len(problems)} job(s) left no frame ({problems[0].job}: {problems[0].error}): a missing point "
                  f"can hide the optimum; re-run the sweep (finished jobs are skipped)")
    return TransferVerdict(status, reason, shifts, rules, axis)
