"""The readout's multiplier, measured: how the model's logits scale in width against what its readout's weight alone
would give them.

Stage: judge (between the judged series and the parameter audit). Input: the verdict's judged series (slopes of one
statistic per module, tensor and step, with each module's role and call order) and the jobs' facts (the readout
weight's init rms per width; a ``MuReadout``'s own multiplier). Output: per configuration an :class:`OutputScale` —
the readout (the last output-role module that owns a parameter), the model's output (the last output-role module to
run: the readout, a container whose ``forward`` multiplies its logits, or ``(root)``), and the exponent in width of
the multiplier between them:

* **after the readout** — the model's output over the readout's output at the same step (the slope of one minus the
  other: exact for a multiplier, ``logits * base_width / width`` in ``forward`` gives -1);
* **before it** — on its input (torchtitan's ``h * alpha / width_mult`` before ``output(h)``, a ``MuReadout``'s own
  ``output_mult / width_mult``): the slope of the readout's input where the ``in`` tensor was recorded (plus a
  ``MuReadout``'s multiplier, applied inside the module), else the readout's output at initialisation against its
  weight's init (a drawn ``W x`` over ``fan_in`` Θ(1) inputs scales like ``std(W) * sqrt(fan_in)``), else the
  ``MuReadout``'s multiplier alone, else not measured.

muP needs the readout's *effective* weight (multiplier times weight) at init std ∝ 1/fan_in (or zero) and, with Adam,
at an effective learning rate ∝ 1/fan_in: a readout behind a 1/width multiplier keeps a constant init and the base
lr; one without it takes both ∝ 1/width (Tensor Programs V, Table 3). The audit
(:func:`coordcheck.judge.audit.audit_long`) judges the readout's init and learning rate under
``parametrization=none`` against the multiplier measured here. Never imports torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["OutputScale", "output_scales", "judge_readouts"]


@dataclass(frozen=True)
class OutputScale:
    """The multiplier around a configuration's readout (module docstring); exponents in width, NaN: not measured."""

    readout: str
    model_output: str
    after: float
    before: float
    how: str  # how it was measured, in words

    @property
    def total(self) -> float:
        return self.after + self.before

    @property
    def measured(self) -> bool:
        return bool(np.isfinite(self.total))


def _slope(s: pd.DataFrame, module: str, tensor: str, step: int | None = None) -> pd.Series:
    """``module``'s ``tensor`` slope per step (finite, not all zero)."""
    g = s[(s["module"] == module) & (s["tensor"] == tensor)]
    if step is not None:
        g = g[g["step"] == step]
    g = g[np.isfinite(g["slope"].to_numpy(dtype=float)) & ~g["all_zero"].astype(bool)]
    return g.set_index("step")["slope"].astype(float)


def _weights(facts: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, dict[int, Mapping[str, Any]]]]:
    """config_id -> parameter -> width -> its audit facts."""
    out: dict[str, dict[str, dict[int, Mapping[str, Any]]]] = {}
    for f in facts:
        if f.get("audit") and f.get("width") is not None:
            for name, p in f["audit"].get("params", {}).items():
                out.setdefault(str(f.get("config_id")), {}).setdefault(name, {}).setdefault(int(f["width"]), p)
    return out


def _output_like(by_width: Mapping[int, Mapping[str, Any]]) -> bool:
    """A matrix whose fan-in (its last dimension: ``nn.Linear``'s ``(out, in)``) grows with width and whose fan-out
    does not: a readout's weight, not an embedding's nor a scalar's."""
    dims = [list(by_width[w].get("dims") or []) for w in sorted(by_width)]
    if len(dims) < 2 or any(len(d) != 2 for d in dims) or any(by_width[w].get("embedding") for w in by_width):
        return False
    return dims[0][1] != dims[-1][1] and dims[0][0] == dims[-1][0]


def _exponent(by_width: Mapping[int, Mapping[str, Any]], key: str) -> float:
    """The exponent in width of a fact (least squares on log2 against log2 width); NaN when it is missing or zero."""
    pts = [(w, by_width[w].get(key)) for w in sorted(by_width)]
    pts = [(w, float(v)) for w, v in pts if v is not None and np.isfinite(float(v)) and float(v) != 0]
    if len(pts) < 2:
        return np.nan
    w, v = np.log2([p[0] for p in pts]), np.log2(np.abs([p[1] for p in pts]))
    return float(np.polyfit(w, v, 1)[0])


def output_scales(series: pd.DataFrame, facts: Iterable[Mapping[str, Any]]) -> dict[str, OutputScale]:
    """``config_id -> OutputScale`` for each configuration with an output-role module that owns a parameter (module
    docstring). ``series``: the verdict's judged series (one statistic)."""
    params = _weights(facts)
    out: dict[str, OutputScale] = {}
    for cid, s in series.groupby("config_id", sort=False):
        outputs = s[s["role"] == "output"]
        if outputs.empty:
            continue
        order = outputs.groupby("module")["call_order"].max().sort_values()
        mine = params.get(str(cid), {})
        owners = {n.rpartition(".")[0] or "(root)": n for n, by_width in mine.items() if _output_like(by_width)}
        readouts = [m for m in order.index if m in owners]
        if not readouts:
            continue
        r, o = readouts[-1], str(order.index[-1])
        weight = mine[owners[r]]
        mult = _exponent(weight, "mult")  # a MuReadout's own output_mult / width_mult, applied inside the module
        mult = 0.0 if not np.isfinite(mult) else mult
        how = []
        after = 0.0
        if o != r:
            both = _slope(s, o, "out").to_frame("o").join(_slope(s, r, "out").to_frame("r"), how="inner")
            if both.empty:
                after = np.nan
                how.append(f"{o} over {r}: not measured (zero at every step)")
            else:
                after = float((both["o"] - both["r"]).median())
                how.append(f"{o}'s output over {r}'s: width^{after:+.2f}")
        x = _slope(s, r, "in", 0)
        init = _exponent(weight, "rms")
        y0 = _slope(s, r, "out", 0)
        if len(x):
            before = float(x.iloc[0]) + mult
            how.append(f"{r}'s input at step 0: width^{float(x.iloc[0]):+.2f}"
                       + (f", its MuReadout multiplier width^{mult:+.2f}" if mult else ""))
        elif len(y0) and np.isfinite(init):
            before = float(y0.iloc[0]) - (init + 0.5)
            how.append(f"{r}'s output at step 0 width^{float(y0.iloc[0]):+.2f} against its weight's init "
                       f"width^{init:+.2f} over a growing fan-in: width^{before:+.2f} before it")
        elif mult:
            before = mult
            how.append(f"{r}'s MuReadout multiplier width^{mult:+.2f}")
        else:
            before = np.nan
            how.append(f"before {r}: not measured (a zero readout and no 'in' tensor)")
        out[str(cid)] = OutputScale(r, o, after, before, "; ".join(how))
    return out


READOUT_WHY = {
    1: "behind the 1/width multiplier on its output ({how}), muP's output weight keeps {what}",
    0: "without a 1/width multiplier on its output ({how}), muP's output weight takes {what}",
    -1: "with a 1/width multiplier added on its output (it has none: {how}; both together), muP's output weight "
        "keeps {what}",  # the design with the multiplier, chosen where it is missing: this change alone is not it
}
READOUT_LR = {"adam": (0.0, -1.0), "adamw": (0.0, -1.0), "sgd": (1.0, -1.0)}  # family -> lr exponent (with, without)


def judge_readouts(long: pd.DataFrame, outputs: Mapping[str, OutputScale], tol: float) -> pd.DataFrame:
    """The output-like weights' rows under ``parametrization=none`` (the readout; a router inside the model), judged
    against the muP design that needs the fewest of their knobs changed, given the multiplier on their output —
    measured on the frame for the model's readout (``outputs``), none for the others (no multiplier a frame can
    show: a router's logits go to its softmax) —: **with** a 1/width multiplier (the multiplier's exponent -1, a
    constant init, Adam's base lr / SGD's lr x width — a ``MuReadout``) or **without** (no multiplier, init std and
    Adam's or SGD's lr ∝ 1/width: Tensor Programs V, Table 3). A tie takes mup's form (a ``MuReadout``) and says the
    other. A ``mult`` row (the multiplier's exponent) is added, failing where the design is the one with the
    multiplier and it is missing; a zero init counts for both designs. With the readout's multiplier not measured its
    init and lr rows are
    ``not judged`` and say why."""
    if long.empty:
        return long
    long = long.copy()
    extra = []
    cands = long[(long["class"] == "output-like") & (long["parametrization"] == "none")
                 & long["parameter"].str.endswith("weight")]
    for (cid, name), mine in cands.groupby(["config_id", "parameter"], sort=False):
        if (mine["quantity"] == "mult").any():  # a MuReadout's multiplier: read, not measured
            continue
        module = str(mine["module"].iloc[0])
        readout = outputs.get(str(cid))
        scale = readout if readout is not None and readout.readout == module else OutputScale(
            module, module, 0.0, 0.0, "no multiplier on its logits: an output-like matrix inside the model, a router")
        weight = mine
        rows = long.index[(long["config_id"] == cid) & (long["parameter"] == name)]
        init = long.loc[rows][long.loc[rows, "quantity"] == "init"]
        lr = long.loc[rows][long.loc[rows, "quantity"] == "lr"]
        family = str(weight["family"].iloc[0])
        if not scale.measured:
            for i in (*init.index, *lr.index):
                if long.at[i, "status"] not in ("zero", ""):
                    long.loc[i, ["status", "reason"]] = ["not judged", f"the readout's multiplier is not measured "
                                                                       f"({scale.how})"]
            continue
        m = scale.total
        zero = len(init) and init["status"].iloc[0] == "zero"
        i_exp = float(init["exponent"].iloc[0]) if len(init) else np.nan
        l_exp = float(lr["exponent"].iloc[0]) if len(lr) else np.nan
        lr_with, lr_without = READOUT_LR.get(family, (np.nan, np.nan))

        def off(value: float, target: float) -> int:
            return int(np.isfinite(value) and np.isfinite(target) and abs(value - target) > tol)

        cost = {1: off(m, -1.0) + (0 if zero else off(i_exp, 0.0)) + off(l_exp, lr_with),
                0: off(m, 0.0) + (0 if zero else off(i_exp, -1.0)) + off(l_exp, lr_without)}
        design = min(cost, key=lambda d: (cost[d], -d))  # a tie: mup's form (MuReadout), the other said beside it
        other = ("; or without a multiplier: init std ∝ 1/fan_in and lr * base_width / width — as many changes"
                 if design and cost[0] == cost[1] else "")
        for part, target, what in ((init, 0.0 if design else -1.0, "init"), (lr, lr_with if design else lr_without,
                                                                             "lr")):
            if part.empty or not np.isfinite(target):
                continue
            i = part.index[0]
            if long.at[i, "status"] == "zero":
                continue
            keep = {"init": "an init std constant in width", "lr": "the base lr" if target == 0 else
                    "lr x width / base_width (MuSGD)"}[what] if design else \
                {"init": "an init std ∝ 1/fan_in", "lr": "lr * base_width / width"}[what]
            e = float(long.at[i, "exponent"])
            lo, hi = target - tol, target + tol
            c_lo, c_hi = float(long.at[i, "ci_low"]), float(long.at[i, "ci_high"])
            outside = not lo <= e <= hi
            sig = (c_lo > hi or c_hi < lo) if np.isfinite(c_lo) else outside
            long.loc[i, ["expected", "expected_low", "expected_high", "status", "reason"]] = [
                target, lo, hi, ("fail" if sig else "inconclusive") if outside else "pass",
                READOUT_WHY[-1 if design and off(m, -1.0) else design].format(how=scale.how, what=keep)]
        mult_status = ("fail" if off(m, -1.0) else "pass") if design else "pass"
        extra.append((cid, "none", name, module, int(weight["order"].iloc[0]), "output-like", family,
                      weight["dims"].iloc[0], weight["grows"].iloc[0], "mult", np.nan, np.nan, "", m, m, m,
                      -1.0 if design else 0.0, (-1.0 if design else 0.0) - tol, (-1.0 if design else 0.0) + tol,
                      mult_status, f"measured: {scale.how}{other}"))
    if extra:
        long = pd.concat([long, pd.DataFrame(extra, columns=long.columns)], ignore_index=True)
        long = long.sort_values(["config_id", "order"], kind="stable").reset_index(drop=True)
    return long
