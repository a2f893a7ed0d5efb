"""Causes: which parameter's initialisation or learning rate, or which scale outside any parameter, breaks muP.

Stage: judge (after the series are judged). Input: the verdict's judged series (``status``,
``direction``, ``in_window``, bands; with the ``own`` and ``in`` tensors of the probes), its module
table and the loss rows of the frame. Output: :class:`Causes` — the causes (one row per group of
causes), the evidence per parameter-owning module (its exponents against the band muP allows), each
module's ``cause`` / ``inherited_from``, and for a configuration without a cause what was seen
instead. Pure pandas; never imports torch.

The walk, per configuration, in call order; only ``fail`` series inside the stability window count,
after the transient rule (an ``inconclusive`` series never makes a cause):

* **Initialisation** (step 0). A parameter-owning module whose ``own`` (its init gain) fails is a
  cause (``init``). Captured attention logits failing at step 0 with no init cause before them:
  ``attention_scale``. The model's output failing at step 0 with no cause at step 0 before it:
  ``output_multiplier`` (a learning rate that fails after updates cannot explain the output at initialisation).
* **Updates** (steps >= 1). A parameter-owning module whose ``own`` fails is a cause (``lr``: hidden,
  input or norm), unless its input explains it (its ``in`` leaves the band in the same direction,
  with a slope within ``tol`` of the own slope: SGD, whose update scales with the input). Attention
  logits failing with no cause before them: ``attention_scale``.
* **The model's output** (the last output module to run: a readout, ``(root)`` or a container with
  a multiplier in its ``forward``) is read on its ``out`` and ``delta``, not on the readout's own
  gain (``verdict.READOUT_OWN``: a multiplier on the readout's input hides in that gain). Failing
  with no cause before it: growing at step 0, or after updates while its logits at step 0 do not
  shrink either (no 1/width anywhere) -> ``output_multiplier``; growing after updates although the
  logits shrink at step 0, or shrinking -> ``readout_lr``.
* A module is one cause at most; a failing initialisation comes first (fix it, then look again): causes seen at
  step 0 are listed before those seen after updates, each in call order.
* Causes of one kind, direction and role are grouped ("all 14 hidden matrices"); the exponent
  shown for a group is its median member's (slope and interval), the step that member's worst.
* Every other failing module inherits from the nearest cause before it in call order; with none
  before it, from the first cause after it ("through the backward pass").
* A failing or inconclusive configuration without a cause gets what was seen instead
  (:attr:`Causes.findings`), naming no knob.

``KINDS`` is the closed set of kinds (the parameter audit and Adam's epsilon add rows of kinds
``audit`` and ``epsilon`` to the same table).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

__all__ = ["KINDS", "CAUSE_COLUMNS", "EVIDENCE_COLUMNS", "MUON_FIX", "NO_OWN_NOTE", "NOT_MEASURED_HINT", "JUMP",
           "Causes", "find_causes", "own_diagnosis", "loss_jump"]

KINDS = {
    "init": "a parameter's initialisation does not scale like muP's (init gain at step 0)",
    "lr": "a parameter's learning rate does not scale like muP's (own update after steps)",
    "output_multiplier": "the model's output lacks muP's 1/width multiplier (readout or outside any module)",
    "readout_lr": "the readout's learning rate does not scale like muP's",
    "attention_scale": "attention logits scaled 1/sqrt(d_head) instead of 1/d_head",
    "structure": "the model's structure does not fit the parametrization (a plain nn.Linear readout under mup)",
    "epsilon": "Adam's epsilon dominates the update at large width",
    "audit": "the parameter audit: a measured init std or learning rate against muP's exponent",
    "candidates": "a symptom whose module's knobs the facts find right: no single fix, the candidates the evidence "
                  "leaves (coordcheck.judge.reconcile)",
}
CAUSE_COLUMNS = ["config_id", "parametrization", "order", "kind", "what", "modules", "measure", "step", "exponent",
                 "ci_low", "ci_high", "expected", "fix", "line", "direction"]  # direction: grows / shrinks
EVIDENCE_COLUMNS = ["config_id", "parametrization", "name", "measure", "exponent", "ci_low", "ci_high",
                    "expected_low", "expected_high", "violates", "order", "step", "role", "status"]
MODULE_COLUMNS = ["cause", "inherited_from", "inherited_via"]

# The hidden-matrix learning-rate fix under Muon (optimizer column contains "muon"): which adjust_lr_fn keeps hidden
# updates width-invariant is measured in the Muon work of issue 17; this constant holds its answer.
MUON_FIX = ("the hidden matrices' Muon learning rate is not width-invariant (adjust_lr_fn=match_rms_adamw makes the "
            "update's spectral norm grow like sqrt(width)): set optimizer.adjust_lr_fn=original, which keeps it ~ "
            "sqrt(fan_out / fan_in) (flat in width), or give them lr * sqrt(base_width / width)")
NOT_MEASURED_HINT = "'tensors=[out,delta,in,own]' tells whether a parameter causes it"  # an undecided symptom
NO_OWN_NOTE = ("not measured: which parameter's init or learning rate is off needs the probes' in and own tensors, "
               "which a failing sweep records itself (cause_pass=true, the default) and tensors=[out,delta,in,own] "
               "records in every sweep; the reason names a likely cause from the symptoms only")
# A loss "jump" (for the no-cause finding): the loss at some width and seed rises more than this fraction above its
# running minimum — far below the stability window's rule (50%), which cuts the judged steps.
JUMP = 0.05
# The readout's init gain "shrinks" (a 1/width multiplier or init is there) below this slope: muP's readout gives -1,
# standard parametrization's 0.
INIT_SHRINKS = -0.5
PLURAL = {"hidden": "hidden matrices", "input": "input layers", "norm": "norm layers", "output": "output layers",
          "router": "routers", "routing": "routing logits",
          "attention": "attention modules", "(logits)": "attention logits"}
MEASURE_WORDS = {"init": "init gain", "own": "own update", "out": "output", "delta": "change since step 0"}

INIT_FIX = "init std does not scale like fan_in^-1/2: give {it} std ∝ fan_in**-0.5"
ROUTER_INIT_FIX = ("an output-like matrix inside the model (width → a fixed size: a router, width → experts) is an "
                   "output weight: give {it} std ∝ 1/fan_in (or zero), or multiply its logits by base_width/width (a "
                   "MuReadout)")
UPDATE_FIX = {
    ("hidden", "grows"): "the hidden learning rate is not scaled by width: give {them} lr * base_width / width",
    ("hidden", "shrinks"): "the hidden learning rate is scaled down too much (by width more than once?): give {them} "
                           "lr * base_width / width, once",
    ("input", "grows"): "the input layer's learning rate grows with width: keep {its} base lr",
    ("input", "shrinks"): "the embedding/input learning rate is scaled like a hidden matrix: keep {its} base lr",
    ("norm", "grows"): "the norm's learning rate grows with width: norm gains and biases keep the base lr",
    ("norm", "shrinks"): "the norm's learning rate is scaled like a hidden matrix: norm gains and biases keep the "
                         "base lr",
    ("output", "shrinks"): "the readout's learning rate is scaled down too much: with a 1/width output multiplier "
                           "the readout keeps the base lr",
    ("router", "grows"): "an output-like matrix inside the model (width → a fixed size: a router, width → experts) is "
                         "an output weight: give {them} lr * base_width / width (Adam), or multiply its logits by "
                         "base_width/width (a MuReadout) and keep the base lr",
    ("router", "shrinks"): "the router's learning rate is scaled down too much: a router with a 1/width logit "
                           "multiplier keeps the base lr, one without it takes lr * base_width / width, once",
}
OWN_ROLES = ("input", "norm", "router")  # roles with their own update fix; every other parameter-owning module: hidden
# Under SGD muP keeps the hidden learning rate (MuSGD scales the input layer's up and the readout's down by width): a
# hidden update that grows comes back from a readout not scaled by 1/width through the backward pass (measured on the
# built-in MLP in standard parametrization with SGD: hidden own +0.45, readout own +0.99), and the input layer's
# update shrinks (-0.51) unless its lr grows with width.
SGD_HIDDEN_FIX = ("under SGD muP keeps the hidden learning rate: a growing hidden update usually comes back from the "
                  "readout (its output multiplier or init ∝ 1/width) through the backward pass — fix that first "
                  "(MuSGD)")
SGD_INPUT_FIX = "under SGD muP scales the input layer's learning rate up: give {them} lr * width / base_width (MuSGD)"
SP_NOTE = " (what standard parametrization does: expected for the SP control)"
SP_HIDDEN_FIX = ("one learning rate for every layer, which is what standard parametrization does (expected for the "
                 "SP control): parametrization=mup gives hidden matrices lr * base_width / width")
OUTPUT_MULTIPLIER_FIX = "multiply the logits by base_width/width, or use MuReadout"
SP_OUTPUT_FIX = ("no 1/width output multiplier, which is what standard parametrization does (expected for the SP "
                 "control): parametrization=mup adds it")
ZERO_READOUT_FIX = ("multiply the logits by base_width/width (MuReadout), or give the readout lr * base_width / "
                    "width: with a zero-initialised readout the two cannot be told apart")
READOUT_LR_FIX = ("the readout's learning rate is not scaled by width although the logits shrink at initialisation: "
                  "give it lr * base_width / width, or put the 1/width multiplier in the forward (MuReadout) instead")
OUTSIDE_FIX = ("a missing output multiplier outside any parameter-owning module (in {where}'s forward): multiply the "
               "logits by base_width/width")
ATTENTION_FIX = "attention logits scaled 1/sqrt(d_head) instead of 1/d_head: use q.k * (1/d_head) (muP attention)"


@dataclass
class Causes:
    """What :func:`find_causes` returns."""

    causes: pd.DataFrame  # CAUSE_COLUMNS, one row per cause group
    evidence: pd.DataFrame  # EVIDENCE_COLUMNS, one row per (configuration, name, measure)
    modules: pd.DataFrame  # the module table with MODULE_COLUMNS added
    findings: dict[str, str] = field(default_factory=dict)  # config_id -> what was seen, where it has no cause
    measured: set[str] = field(default_factory=set)  # configurations whose frame has `own` rows


def own_diagnosis(role: str, step: int, direction: str) -> str:
    """The per-series diagnosis of a failing ``own`` series (the configuration's cause may refine it)."""
    if direction not in ("grows", "shrinks"):
        return ""
    if step == 0:
        return (ROUTER_INIT_FIX if role == "router" else INIT_FIX).format(it="it")
    if role == "output":
        return (OUTPUT_MULTIPLIER_FIX + " (or scale the readout's learning rate)" if direction == "grows"
                else UPDATE_FIX[("output", "shrinks")])
    return UPDATE_FIX.get((role if role in OWN_ROLES else "hidden", direction), "").format(them="it", its="its")


def _expected(row: pd.Series, tol: float) -> str:
    """What muP expects of a judged series, in words: its band without the tolerance."""
    if np.isfinite(float(row["band_low"])):
        return "0 (flat)"
    top = float(row["band_high"]) - tol
    return "≤ 0 (may shrink)" if abs(top) < 1e-9 else f"{top:+.2f} or less"


def _worst(rows: pd.DataFrame) -> pd.Series:
    """The row furthest outside its band (smallest margin)."""
    return rows.loc[rows["margin"].fillna(np.inf).sort_values(kind="stable").index[0]]


def loss_jump(loss: pd.DataFrame) -> tuple[int, int, float, float, str] | None:
    """The first (step, width, before, after) at which some width and seed's loss rises more than :data:`JUMP`
    above its running minimum, and at which widths it jumps by then ("every width" or a list)."""
    best, jumped = None, {}
    for (w, _), g in loss.sort_values("step").groupby(["width", "seed"], sort=True):
        v = g["value"].to_numpy(dtype=float)
        steps = g["step"].to_numpy()
        running = np.minimum.accumulate(np.where(np.isfinite(v), v, np.inf))
        before = np.concatenate([[np.inf], running[:-1]])
        hit = np.flatnonzero((np.arange(len(v)) > 0) & np.isfinite(v) & (v > (1 + JUMP) * before))
        if len(hit):
            jumped[int(w)] = min(jumped.get(int(w), steps[hit[0]]), steps[hit[0]])
        if len(hit) and (best is None or steps[hit[0]] < best[0]):
            best = (int(steps[hit[0]]), int(w), float(before[hit[0]]), float(v[hit[0]]))
    if best is None:
        return None
    by_then = [w for w, t in sorted(jumped.items()) if t <= best[0]]
    where = "every width" if len(by_then) == loss["width"].nunique() else "width " + ", ".join(map(str, by_then))
    return (*best, where)


def _finding(judged: pd.DataFrame, loss: pd.DataFrame, measured: bool = True) -> str:
    """What a configuration without a cause saw: its earliest symptom in call order, and the loss if it jumped.

    ``measured``: the frame has own updates, so "no parameter's ... violates muP" is a measurement; without them
    (the default tensors) only the symptom is said, and how to find out whether a parameter causes it — never a
    knob guessed from the symptom's role and direction (the verdict's symptom diagnosis), which may be right."""
    head = "no parameter's own update or initialisation violates muP"
    bad = judged[judged["status"].isin(["fail", "inconclusive"]) & judged["direction"].isin(["grows", "shrinks"])
                 & ~judged["tensor"].isin(["own", "in"])]
    if bad.empty:
        return f"no cause found: {head}" if measured else ""
    first = bad.assign(_later=bad["tensor"] != "out").sort_values(["call_order", "step", "_later"]).iloc[0]
    rows = bad[(bad["module"] == first["module"]) & (bad["direction"] == first["direction"])]
    w = _worst(rows)
    seen = (f"{first['module']} {MEASURE_WORDS.get(first['tensor'], first['tensor'])} {first['direction']} with "
            f"width from step {int(first['step'])} on ({w['slope']:+.2f} [{w['ci_low']:+.2f}, {w['ci_high']:+.2f}] "
            f"at step {int(w['step'])})")
    jump = loss_jump(loss)
    if jump is not None and int(first["step"]) >= 1 and jump[0] <= int(rows["step"].max()):
        step, width, a, b, where = jump
        jumps = (f"{seen} while the loss jumps at step {step} ({where}; width {width}: {a:.3g} -> {b:.3g}): "
                 f"dynamics at the edge of stability — lower the learning rate")
        return f"{head}; {jumps}" if measured else jumps
    return f"no cause found: {head}; {seen}" if measured else seen


def _output_kind(direction: str, init_out: pd.Series | None) -> str:
    """The model's output growing after updates is a missing multiplier when its logits at initialisation do not
    shrink either (nothing scales it by 1/width), else the readout's learning rate; shrinking: the readout's lr."""
    if direction == "shrinks":
        return "readout_lr"
    shrinks = init_out is not None and init_out["status"] != "zero" and float(init_out["slope"]) < INIT_SHRINKS
    return "readout_lr" if shrinks else "output_multiplier"


def _fix(kind: str, role: str, direction: str, n: int, parametrization: str, optimizer: str, row: pd.Series,
         init_row: pd.Series | None, owner: bool) -> str:
    them, its = ("them", "their") if n > 1 else ("it", "its")
    if kind == "init":
        return (ROUTER_INIT_FIX if role == "router" else INIT_FIX).format(it=them)
    if kind == "attention_scale":
        return str(row["diagnosis"]) or ATTENTION_FIX  # rule 3b's words: 1/sqrt(d) vs 1/d, or q and k growing
    if kind == "output_multiplier":
        if not owner:
            return OUTSIDE_FIX.format(where="the model" if row["module"] == "(root)" else row["module"])
        if parametrization == "sp":
            return SP_OUTPUT_FIX
        return ZERO_READOUT_FIX if init_row is not None and init_row["status"] == "zero" else OUTPUT_MULTIPLIER_FIX
    if kind == "readout_lr":
        return (READOUT_LR_FIX if direction == "grows" else UPDATE_FIX[("output", "shrinks")]) + (
            SP_NOTE if parametrization == "sp" else "")
    key = (role if role in OWN_ROLES else "hidden", direction)
    sgd = "sgd" in optimizer.lower()
    if key == ("hidden", "grows"):
        if "muon" in optimizer.lower():
            return MUON_FIX
        if sgd:
            return SGD_HIDDEN_FIX + (SP_NOTE if parametrization == "sp" else "")
        if parametrization == "sp":
            return SP_HIDDEN_FIX
    if key == ("input", "shrinks") and sgd:
        return SGD_INPUT_FIX.format(them=them) + (SP_NOTE if parametrization == "sp" else "")
    return UPDATE_FIX[key].format(them=them, its=its) + (SP_NOTE if parametrization == "sp" else "")


def find_causes(series: pd.DataFrame, modules: pd.DataFrame, loss: pd.DataFrame, tol: float,
                shrink_tol: float, gross: float) -> Causes:
    """Walk each configuration's modules in call order; see the module docstring.

    ``series``: the verdict's judged series of one statistic (with ``in_window``); ``modules``: its module table;
    ``loss``: the frame's loss rows (``config_id, width, seed, step, value``); ``tol``: the verdict's growth tolerance
    (also how close an input's slope must be to explain an own slope); ``shrink_tol`` and ``gross``: its shrink
    tolerance and gross margin (rule 4), for the readout's own change (:func:`_readout_change`).
    """
    causes, evidence, findings, measured = [], [], {}, set()
    mods = modules.assign(cause="", inherited_from="", inherited_via="")
    for cid, s in series.groupby("config_id", sort=False):
        own = s[s["tensor"] == "own"]
        if own.empty:  # no causes without own updates; what it saw, for an undecided verdict that names no knob
            findings[cid] = _finding(s[s["in_window"]], loss[loss["config_id"] == cid], measured=False)
            continue
        measured.add(cid)
        order = s.groupby("module")["call_order"].min()
        judged = s[s["in_window"]]
        fails = judged[(judged["status"] == "fail") & judged["direction"].isin(["grows", "shrinks"])]
        found = _parameter_causes(judged, fails, set(own["module"]), order, tol)
        logits = [m for m in order.sort_values().index
                  if m not in set(own["module"]) and s.loc[s["module"] == m, "role"].iloc[0] == "attention"]
        found += _other_causes(s, fails, set(own["module"]), logits, order, found, (-shrink_tol, tol), gross)
        at_init_first = sorted(found, key=lambda c: (int(c["row"]["step"]) > 0, c["order"]))  # fix these first
        rows, what_of = _grouped(at_init_first, own, logits, tol)
        causes += [{"config_id": cid, "parametrization": str(s["parametrization"].iloc[0]), **r} for r in rows]
        outputs = s[s["role"] == "output"]
        readout = outputs.loc[outputs["call_order"].idxmax(), "module"] if len(outputs) else None
        change = _readout_change(s, readout, (-shrink_tol, tol), every=True) if readout in set(own["module"]) else None
        evidence += _evidence(cid, str(s["parametrization"].iloc[0]), judged, own, order, found, readout, change)
        _inherit(mods, cid, order, what_of)
        if not found:
            findings[cid] = _finding(judged, loss[loss["config_id"] == cid])
    return Causes(pd.DataFrame(causes, columns=CAUSE_COLUMNS), pd.DataFrame(evidence, columns=EVIDENCE_COLUMNS), mods,
                  findings, measured)


def _cause(module: str, order: pd.Series, kind: str, row: pd.Series, init_row: pd.Series | None = None,
           owner: bool = True) -> dict:
    """One cause module: what it is, where it runs, the series that shows it (and, for an owner, its init gain)."""
    measure = ("init" if kind == "init" else "own") if owner and row["tensor"] == "own" else str(row["tensor"])
    return dict(module=module, order=int(order[module]), role=str(row["role"]), kind=kind,
                direction=str(row["direction"]), measure=measure, row=row, init_row=init_row, owner=owner)


def _parameter_causes(judged: pd.DataFrame, fails: pd.DataFrame, owners: set[str], order: pd.Series,
                      tol: float) -> list[dict]:
    """Parameter-owning modules whose init gain (step 0) or own update (steps >= 1) fails; the init comes first. An
    own update whose input leaves the band the same way, within ``tol`` of its slope, is explained by it (SGD)."""
    found = []
    for m in sorted(owners, key=order.get):  # the readout's own is not judged (verdict.READOUT_OWN): never here
        f = fails[(fails["module"] == m) & (fails["tensor"] == "own")]
        if (f["step"] == 0).any():
            found.append(_cause(m, order, "init", f[f["step"] == 0].iloc[0]))
            continue
        x = judged[(judged["module"] == m) & (judged["tensor"] == "in")].set_index("step")
        unexplained = []
        for r in f[f["step"] >= 1].itertuples():
            if r.step in x.index:
                xs = float(x.loc[r.step, "slope"])
                if (xs > r.band_high if r.direction == "grows" else xs < r.band_low) and abs(xs - r.slope) <= tol:
                    continue  # the input explains it
            unexplained.append(r.Index)
        if unexplained:
            w = _worst(f.loc[unexplained])
            found.append(_cause(m, order, "lr", w))
    return found


def _readout_change(s: pd.DataFrame, m: str, band: tuple[float, float], every: bool = False) -> pd.DataFrame:
    """The readout's own change *not* divided by its input's scale, per updated step in the window: the slope of
    ``own`` plus the slope of ``in`` (``f(x_t; θ_t) - f(x_t; θ_0)`` itself, which muP holds flat for the logits), with
    the sum of their intervals; the rows where that whole interval is outside ``band`` (``status`` fail), or with
    ``every`` all of them."""
    j = s[s["in_window"] & (s["module"] == m) & (s["step"] >= 1)]
    o, x = j[j["tensor"] == "own"].set_index("step"), j[j["tensor"] == "in"].set_index("step")
    steps = o.index.intersection(x.index)
    if steps.empty:  # no own with its input (a frame recorded without in): nothing to read
        return pd.DataFrame(columns=[*s.columns, "band_low", "band_high", "direction", "status", "margin"])
    r = o.loc[steps].copy()
    for c in ("slope", "ci_low", "ci_high"):
        r[c] = o.loc[steps, c] + x.loc[steps, c]
    lo, hi = band
    r["band_low"], r["band_high"] = lo, hi
    r["direction"] = np.where(r["ci_low"] > hi, "grows", np.where(r["ci_high"] < lo, "shrinks", ""))
    r["status"] = np.where(r["direction"] != "", "fail", "pass")
    r["margin"] = np.minimum(hi - r["slope"], r["slope"] - lo)
    r = r.reset_index()
    return r if every else r[r["status"] == "fail"]


def _other_causes(s: pd.DataFrame, fails: pd.DataFrame, owners: set[str], logits: list[str], order: pd.Series,
                  found: list[dict], band: tuple[float, float], gross: float) -> list[dict]:
    """Causes outside the parameters' own gains: attention logits failing with no init cause before them at step 0
    (no cause at all after updates; another block's logits do not count: each block has its own), and the model's
    output (the last output module to run, a readout or not): a readout whose own change (:func:`_readout_change`)
    leaves the band at two updated steps or more, or at one by more than ``gross`` (rule 4: standard
    parametrization's readout jumps right after the first update, then oscillates), is a cause whatever runs before
    it; otherwise the output failing on
    its out or delta with no cause before it. At step 0 that is a missing multiplier; after updates a missing
    multiplier or the readout's learning rate, told apart by its logits at step 0."""
    outputs = s[s["role"] == "output"]
    model_output = outputs.loc[outputs["call_order"].idxmax(), "module"] if len(outputs) else None
    extra: list[dict] = []
    for m in [m for m in order.sort_values().index if m == model_output or m in logits]:
        f = fails[(fails["module"] == m) & ~fails["tensor"].isin(["own", "in"])]
        owner = m in owners
        if m == model_output and owner:
            raw = _readout_change(s, m, band)
            far = (raw["ci_low"] > band[1] + gross) | (raw["ci_high"] < band[0] - gross)
            if len(raw) >= 2 or far.any() or (len(raw) and s.loc[s["in_window"], "step"].max() == 1):
                init_out = s[(s["module"] == m) & (s["tensor"] == "out") & (s["step"] == 0)]
                init_out = init_out.iloc[0] if len(init_out) else None
                w = _worst(raw)
                extra.append(_cause(m, order, _output_kind(str(w["direction"]), init_out), w, init_out, owner))
                continue
        if f.empty:
            continue
        before = [c for c in found + extra if c["order"] < order[m]
                  and (m == model_output or c["kind"] != "attention_scale")]
        f0, f1 = f[f["step"] == 0], f[f["step"] >= 1]
        if m != model_output:
            kind, init_out = "attention_scale", None
        else:
            init_out = s[(s["module"] == m) & (s["tensor"] == "out") & (s["step"] == 0)]
            init_out = init_out.iloc[0] if len(init_out) else None
            kind = "output_multiplier" if len(f0) else _output_kind(str(_worst(f1)["direction"]), init_out)
        at_init = [c for c in before if int(c["row"]["step"]) == 0]  # only these can explain a step-0 failure
        if len(f0) and not any(c["kind"] == "init" for c in before) and not (m == model_output and at_init):
            extra.append(_cause(m, order, kind, _worst(f0), init_out, owner))
        elif len(f1) and not before:
            extra.append(_cause(m, order, kind, _worst(f1), init_out, owner))
    return extra


def _grouped(found: list[dict], own: pd.DataFrame, logits: list[str], tol: float) -> tuple[list[dict], dict[str, str]]:
    """Causes of one kind, direction, role and measure as one row each (CAUSE_COLUMNS but the configuration's), first
    in call order first; and each cause module's ``what``."""
    groups: dict[tuple, list[dict]] = {}
    for c in found:
        role = c["role"] if c["owner"] or c["role"] != "attention" else "(logits)"
        groups.setdefault((c["kind"], c["direction"], role, c["measure"], c["owner"]), []).append(c)
    totals = {r: len(set(own.loc[own["role"] == r, "module"])) for r in set(own["role"])}
    totals["(logits)"] = len(logits)  # captured or named attention logits: no parameters of their own
    par, opt = str(own["parametrization"].iloc[0]), str(own["optimizer"].iloc[0])
    rows, what_of = [], {}
    for i, ((kind, direction, role, measure, owner), members) in enumerate(groups.items()):
        names = [c["module"] for c in members]
        total, noun = totals.get(role, 0), PLURAL.get(role, f"{role} modules")
        what = names[0] if len(names) == 1 else (
            ("both" if total == 2 else f"all {total}") + f" {noun}" if len(names) == total
            else f"{len(names)} of {total} {noun}")
        rep = sorted(members, key=lambda c: float(c["row"]["slope"]))[(len(members) - 1) // 2]  # the median member
        r = rep["row"]
        fix = _fix(kind, role, direction, len(names), par, opt, r, rep["init_row"], owner)
        expected = _expected(r, tol)
        verb = "does not shrink enough:" if direction == "grows" and r["slope"] <= 0 else direction
        line = (f"{what}: {MEASURE_WORDS.get(measure, measure)} {verb} like width^{r['slope']:+.2f} "
                f"[{r['ci_low']:+.2f}, {r['ci_high']:+.2f}] at step {int(r['step'])} (muP: {expected}) — {fix}")
        rows.append(dict(order=i, kind=kind, what=what, modules=names, measure=measure, step=int(r["step"]),
                         exponent=float(r["slope"]), ci_low=float(r["ci_low"]), ci_high=float(r["ci_high"]),
                         expected=expected, fix=fix, line=line, direction=direction))
        what_of.update({n: what for n in names})
    return rows, what_of


def _inherit(mods: pd.DataFrame, cid: str, order: pd.Series, what_of: dict[str, str]) -> None:
    """Fill the module table's cause columns for configuration ``cid`` in place: a cause module gets its ``what``,
    every other failing module the nearest cause before it (forward), or with none, the first after it (backward)."""
    at_order = sorted((int(order[n]), w) for n, w in what_of.items())
    for idx in mods.index[mods["config_id"] == cid]:
        m = mods.at[idx, "module"]
        if m in what_of:
            mods.at[idx, "cause"] = what_of[m]
        elif mods.at[idx, "status"] == "fail" and at_order:
            at = int(order.get(m, -1))
            up = [w for o, w in at_order if o <= at]  # (a cause at the same place: a capture of its module's)
            mods.at[idx, "inherited_from"], mods.at[idx, "inherited_via"] = (
                (up[-1], "forward") if up else (next(w for o, w in at_order if o > at), "backward"))


def _evidence(cid: str, par: str, judged: pd.DataFrame, own: pd.DataFrame, order: pd.Series, found: list[dict],
              readout: str | None, change: pd.DataFrame | None) -> list[dict]:
    """Per parameter-owning module: its init gain (step 0) and its worst own update (steps >= 1) — for the model's
    readout its own change (:func:`_readout_change`, ``change``) instead, its gain being unjudged; per other cause:
    its failing series."""
    rows = []

    def row(name: str, measure: str, r: pd.Series, violates: bool) -> dict:
        return dict(config_id=cid, parametrization=par, name=name, measure=measure, exponent=float(r["slope"]),
                    ci_low=float(r["ci_low"]), ci_high=float(r["ci_high"]), expected_low=float(r["band_low"]),
                    expected_high=float(r["band_high"]), violates=violates, order=int(order[name]),
                    step=int(r["step"]), role=str(r["role"]), status=str(r["status"]))

    jo = judged[judged["tensor"] == "own"]  # the readout's too, shown though not judged (status skip)
    for m in sorted(set(own["module"]), key=order.get):
        g = jo[jo["module"] == m]
        after = change if m == readout and change is not None and len(change) else g[g["step"] >= 1]
        for measure, part in (("init", g[g["step"] == 0]), ("own", after)):
            if part.empty:
                continue
            bad = part[part["status"] == "fail"]
            r = _worst(bad if len(bad) else part)
            rows.append(row(m, measure, r, bool(len(bad))))
    rows += [row(c["module"], c["measure"], c["row"], True) for c in found if c["measure"] not in ("init", "own")]
    return rows
