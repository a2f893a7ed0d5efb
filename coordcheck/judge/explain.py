"""The causes: each failing series explained by the measured violations upstream of it in call order.

Stage: judge (the last step of :func:`coordcheck.judge.verdict.judge`). Input: the verdict's judged series (status,
direction, stability window, call order) and module table, the measured facts (:func:`coordcheck.judge.facts.
measured_facts`: every parameter's effective init and update against muP's table for its class and optimizer), the
jobs' facts (a structure that does not fit the parametrization) and the loss rows. Output, on the verdict: ``causes``
(:data:`CAUSE_COLUMNS`), ``evidence`` (:data:`EVIDENCE_COLUMNS`), ``audit`` (the facts), the module table's
``cause`` / ``inherited_from`` / ``inherited_via``, ``notes``, and each failing configuration's reason led by its first
cause. The CLI, report.md, report.json, the API, the pytest gate and the recorder's report all read what is set here.

One step, per configuration:

1. **Violations**: the facts that fail (an effective init or update whose exponent and whole interval lie outside muP's
   band), each with its direction.
2. **A failing series is explained** (an ``out`` or ``delta`` series that fails inside the stability window) by each
   violation that can produce it: the same direction, at the series' own module or upstream of it in call order — an
   init at any step, an update from step 1 on; for captured attention logits, only the violations of the attention
   module that computed them. A series nothing upstream explains is explained by an update violation downstream of
   it, through the backward pass.
3. **A cause** is a violation that explains a failing series, in the terms of the optimizer that trains it: an
   Adam-trained parameter whose update falls short of the learning rate its group held during the step has its step
   taken over by ε (kind ``epsilon``), not a learning rate to change; the readout's knobs are fixed whole (its init, its
   learning rate and its multiplier together: the form that needs the fewest changes). Captured attention logits
   failing at initialisation that no violation explains: the attention scale. Causes are ordered by the first step they
   explain (what shows at initialisation first), then call order, and grouped by knob, class, optimizer and direction.
4. **No knob**: a failing configuration without a cause says what was seen and names no knob (kind ``candidates``).
5. **A cause needs a symptom**: a violation that explains no failing series — and weight decay and ε as the optimizer
   declared them, which ten steps cannot show — is a note with its forecast, and never fails a configuration.

Never imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from coordcheck.core.frame import EPS_TENSOR
from coordcheck.judge.eps import eps_table
from coordcheck.judge.facts import CAUSE_COLUMNS, EVIDENCE_COLUMNS, WHAT, fit_points, measured_facts, num
from coordcheck.judge.fixes import ATTENTION_FIX, EPS_FIX, SP, band, group_name, init_fix, knob, lr_fix, readout_fix
from coordcheck.judge.notes import no_rule, quiet
from coordcheck.judge.rules import RANK, Rules
from coordcheck.judge.structure import structure_causes

__all__ = ["KINDS", "CAUSE_COLUMNS", "EVIDENCE_COLUMNS", "explain", "loss_jump", "finding"]

KINDS = {
    "init": "a parameter's effective init (std × multiplier) does not scale like muP's",
    "lr": "a parameter's update per step does not scale like muP's (its learning rate)",
    "epsilon": "Adam's ε takes over a parameter's step at large width",
    "output_multiplier": "the readout's 1/width multiplier is missing (its fix is whole: the multiplier with a "
                         "constant "
                         "init and the base lr, or neither)",
    "attention_scale": "attention logits scaled 1/sqrt(d_head) instead of 1/d_head",
    "structure": "the model's structure does not fit the parametrization (a plain nn.Linear readout under mup)",
    "candidates": "a failing series that no measured fact explains: what was seen, no knob named",
}
JUMP = 0.05  # a loss "jump": some width's loss rises this fraction above its running minimum


def loss_jump(loss: pd.DataFrame) -> tuple[int, int, float, float, str] | None:
    """The first (step, width, before, after, where) at which some width and seed's loss rises more than :data:`JUMP`
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


WORDS = {"out": "output", "delta": "change since step 0", "load": "load"}


def finding(failing: pd.DataFrame, loss: pd.DataFrame, facts_measured: bool,
            inputs: Mapping[str, float] | None = None) -> str:
    """What a failing configuration without a cause saw: its earliest failing series in call order, its input's scale
    where that leaves the band of a feature (``inputs``: module -> the exponent of its input's rms: a multiplier in a
    forward before it), and the loss if it jumped; naming no knob."""
    if failing.empty:
        return ""
    first = failing.assign(_later=failing["tensor"] != "out").sort_values(["call_order", "step", "_later"]).iloc[0]
    rows = failing[(failing["module"] == first["module"]) & (failing["direction"] == first["direction"])]
    w = rows.loc[rows["margin"].fillna(np.inf).sort_values(kind="stable").index[0]]
    seen = (f"{first['module']} {WORDS.get(first['tensor'], first['tensor'])} {first['direction']} with width from "
            f"step {int(first['step'])} on ({w['slope']:+.2f} [{w['ci_low']:+.2f}, {w['ci_high']:+.2f}] at step "
            f"{int(w['step'])})")
    head = ("no measured fact explains it: every parameter's effective init and update upstream are as muP expects"
            if facts_measured else "the weights' facts were not recorded")
    x = (inputs or {}).get(str(first["module"]), np.nan)
    if np.isfinite(x) and abs(x) >= 0.2:
        head += (f"; its input ∝ width^{num(x)}: something between it and the module before it scales it with width "
                 "(a multiplier in a forward)")
    jump = loss_jump(loss)
    if jump is not None and int(first["step"]) >= 1 and jump[0] <= int(rows["step"].max()):
        step, width, a, b, where = jump
        return (f"{seen} while the loss jumps at step {step} ({where}; width {width}: {a:.3g} -> {b:.3g}): "
                f"dynamics at the edge of stability — lower the learning rate; {head}")
    return f"{seen} — {head}"


def _failing(series: pd.DataFrame, status: str = "fail") -> pd.DataFrame:
    """The failing series to explain: in the stability window, leaving their band one way or the other; of a module
    that fails both ways, the way it fails first (a swing back later is the dynamics that follows — a loss that
    jumps —, not a second symptom)."""
    s = series[series["in_window"].astype(bool) & (series["status"] == status)
               & series["direction"].isin(["grows", "shrinks"]) & series["tensor"].isin(["out", "delta", "load"])]
    if s.empty:
        return s
    first = s.sort_values("step", kind="stable").drop_duplicates("module").set_index("module")["direction"]
    return s[s["direction"].to_numpy() == first.reindex(s["module"]).to_numpy()]


def _attention_home(module: str) -> str | None:
    """The module that computed captured logits (``blocks.0.attn.(sdpa)`` -> ``blocks.0.attn``), else None."""
    return module.rsplit(".(", 1)[0] if module.endswith(")") and ".(" in module else None


def _explains(v: pd.Series, s: pd.Series) -> bool:
    """Whether violation ``v`` can produce failing series ``s`` from upstream (or its own module)."""
    if v["direction"] != s["direction"] or (v["quantity"] == "lr" and int(s["step"]) < 1):
        return False
    home = _attention_home(str(s["module"])) if s["role"] == "attention" else None
    if home is not None:
        return str(v["module"]) == home or str(v["module"]).startswith(home + ".")
    return int(v["order"]) <= int(s["call_order"])


def _causes_of(cid: str, par: str, facts: pd.DataFrame, failing: pd.DataFrame, series: pd.DataFrame, tol: float,
               eps: pd.DataFrame, jump: int | None = None) -> tuple[list[dict], set[int]]:
    """The cause rows of one configuration, and the indices of the violations that explain something."""
    viol = facts[facts["status"].eq("fail") & facts["quantity"].isin(["init", "lr"])
                 & facts["direction"].isin(["grows", "shrinks"])]
    outs = facts[facts["class"].eq("output-like") & facts["role"].eq("output")]
    whole_fix = {m: readout_fix(facts, str(m), str(g["family"].iloc[0]), tol) for m, g in outs.groupby("module")}
    readouts = {m for m, fix in whole_fix.items() if fix[2]}  # a readout whose form needs a change: its whole fix
    knobs = {i: knob(v, tol) for i, v in viol.iterrows()}
    viol = viol[[knobs[i] != "dynamics" or v["module"] in readouts for i, v in viol.iterrows()]]  # no knob: an effect
    if viol.empty and failing.empty:
        return [], set()
    first_step: dict[int, int] = {}
    unexplained = []
    for _, s in failing.sort_values(["step", "call_order"]).iterrows():
        up = [i for i, v in viol.iterrows() if _explains(v, s)]
        if not up and int(s["step"]) >= 1:  # through the backward pass: an update, or an output weight, downstream
            up = [i for i, v in viol.iterrows() if (v["quantity"] == "lr" or v["class"] == "output-like")
                  and v["direction"] == s["direction"] and int(v["order"]) > int(s["call_order"])]
        for i in up:
            first_step[i] = min(first_step.get(i, 10 ** 9), int(s["step"]))
        if not up:
            unexplained.append(s)
    causes: list[dict] = []
    used = set(first_step)
    readout = readouts
    groups: dict[tuple, list[int]] = {}
    whole: dict[tuple, tuple[str, str]] = {}  # a readout's group -> its whole fix (kind, fix)
    for i in sorted(first_step, key=lambda i: (first_step[i], int(viol.at[i, "order"]))):
        v = viol.loc[i]
        if v["module"] in readout and v["class"] == "output-like":
            key = ("readout", v["module"])
            whole[key] = whole_fix[v["module"]][:2]
        else:
            key = (knobs[i], v["class"], v["family"], v["direction"], v["quantity"])
        groups.setdefault(key, []).append(i)
    # a violation that no failing series shows yet (a sibling in a later block, its effect still within the band)
    # joins a cause of the same knob, class, optimizer family, direction and quantity: the same fix, measured in it too
    # (a readout-like module, a router in a later block: its own whole fix, when it is a named one's)
    for i, v in viol.iterrows():
        if i in first_step:
            continue
        if v["module"] in readout and v["class"] == "output-like":
            key = ("readout", v["module"])
            like = [k for k in whole if whole[k] == whole_fix[v["module"]][:2]]
            if not like:
                continue
            whole[key] = whole_fix[v["module"]][:2]
            groups.setdefault(key, [])
        else:
            key = (knobs[i], v["class"], v["family"], v["direction"], v["quantity"])
            like = [key] if key in groups else []
            if not like:
                continue
        groups[key].append(i)
        first_step[i] = min(first_step[j] for k in like for j in groups[k] if j in first_step)
        used.add(i)
    for key, members in groups.items():
        rows = viol.loc[members]
        w = rows.loc[(rows["exponent"] - rows["expected"]).abs().idxmax()]
        if key in whole:
            kind, fix = whole[key]
            what = str(key[1])
            facts_text = "; ".join(f"{WHAT[r.quantity]} ∝ width^{num(r.exponent)} (muP: {band(r)}; {r.how})"
                                   for r in rows.itertuples())
            line = f"{what}: {facts_text} — {fix}"
        else:
            kind = key[0]
            peers = facts[(facts["quantity"] == w["quantity"]) & (facts["class"] == w["class"])
                          & (facts["family"] == w["family"]) & facts["status"].isin(["pass", "fail", "inconclusive"])]
            names = list(rows["parameter"])
            what = group_name(names, str(w["class"]), len(peers))
            interval = f" [{num(w['ci_low'])}, {num(w['ci_high'])}]" if np.isfinite(w["ci_low"]) else ""
            head = f"{what}: {WHAT[w['quantity']]} ∝ width^{num(w['exponent'])}{interval} (muP: {band(w)}; {w['how']})"
            if kind == "epsilon":
                fix = EPS_FIX
                mine = eps[eps["parameter"].isin(names)] if len(eps) else eps
                share = ""
                if len(mine):
                    e = mine.loc[mine["wide"].idxmax()]
                    share = (f"; ε ≥ 0.1·√v̂ on {e['narrow']:.0%} of its coordinates at width {int(e['min_width'])}, "
                             f"{e['wide']:.0%} at width {int(e['max_width'])}")
                short = num(w["exponent"] - w["declared"])
                line = (f"{head}: its step falls short of its learning rate by width^{short}"
                        f" — Adam's ε, not the learning rate, sets it{share} — {fix}")
            else:
                fix = init_fix(w, len(names)) if kind == "init" else lr_fix(w, len(names), mup=par == "mup")
                line = f"{head} — {fix}"
        if par == "sp":
            fix, line = fix + SP, line + SP
        modules = list(dict.fromkeys(rows["module"]))
        step = min(first_step[i] for i in members)
        causes.append(dict(config_id=cid, parametrization=par, order=len(causes), kind=kind, what=what,
                           modules=modules, measure=str(w["quantity"]), step=step, exponent=float(w["exponent"]),
                           ci_low=float(w["ci_low"]), ci_high=float(w["ci_high"]), expected=band(w), fix=fix,
                           line=line, direction=str(w["direction"])))
    # attention logits at init that no violation explains: the scale in the op
    att = [s for s in unexplained if s["role"] == "attention" and int(s["step"]) == 0 and s["direction"] == "grows"]
    if att:
        causes.insert(0, _attention_cause(cid, par, att, series, tol, at_init=True))
    # attention logits that grow after updates, with every fact upstream of them muP's, a head dimension that grows
    # (or one not recorded) and a loss that does not jump first: the scale in the op (a zero-initialised query hides
    # it at step 0; 1/√d_head leaves the logits' change growing like √d_head)
    late = [s for s in unexplained if s["role"] == "attention" and int(s["step"]) >= 1 and s["direction"] == "grows"
            and not (np.isfinite(float(s.get("head_exponent", np.nan))) and float(s["head_exponent"]) <= tol)
            and (jump is None or jump > int(s["step"]))
            and not any(int(v["order"]) <= int(s["call_order"]) for _, v in viol.iterrows())]
    if late and not att:
        causes.append(_attention_cause(cid, par, late, series, tol, at_init=False))
    for k, c in enumerate(sorted(causes, key=lambda c: (c["step"] > 0, c["step"], 0))):
        c["order"] = k
    return sorted(causes, key=lambda c: c["order"]), used


def _attention_cause(cid: str, par: str, seen: list[pd.Series], series: pd.DataFrame, tol: float,
                     at_init: bool) -> dict:
    """The attention-scale cause of captured logits ``seen`` that grow with every fact upstream muP's: at step 0
    (``at_init``, the step-0 rule's own diagnosis as its fix where it has one) or after updates."""
    mods = list(dict.fromkeys(str(s["module"]) for s in seen))
    s = max(seen, key=lambda s: float(s["slope"]))
    n_logits = series.loc[series["role"].eq("attention"), "module"].nunique()
    what = mods[0] if len(mods) == 1 else group_name(mods, "", n_logits).replace("parameters", "attention logits")
    named = "" if len(mods) == 1 else f" ({', '.join(mods[:4])}{' ...' if len(mods) > 4 else ''})"
    interval = f"[{s['ci_low']:+.2f}, {s['ci_high']:+.2f}]"
    if at_init:
        fix = str(s.get("diagnosis") or "") or ATTENTION_FIX
        line = (f"{what}{named}: logits ∝ width^{s['slope']:+.2f} {interval} at step 0 (muP: width^"
                f"{float(s['band_high']) - tol:+.2f} or less) with every query and key init as muP expects — {fix}")
        measure, step, expected = "out", 0, "≤ 0 (may shrink)"
    else:
        fix, step = ATTENTION_FIX, int(s["step"])
        line = (f"{what}{named}: logits grow ∝ width^{s['slope']:+.2f} {interval} at step {step}, after updates, with "
                f"every parameter upstream of them as muP expects (init and update measured) — {fix}")
        measure, expected = str(s["tensor"]), f"width^{float(s['band_high']) - tol:+.2f} or less"
    return dict(config_id=cid, parametrization=par, order=0, kind="attention_scale", what=what, modules=mods,
                measure=measure, step=step, exponent=float(s["slope"]), ci_low=float(s["ci_low"]),
                ci_high=float(s["ci_high"]), expected=expected, fix=fix, line=line, direction="grows")


def _unstable(verdict: Any, c: Any, s: pd.DataFrame, loss: pd.DataFrame, inputs: Mapping[str, float]) -> None:
    """An undecided configuration whose every fact is as muP expects and whose loss jumps at or before its undecided
    series ``s``: the reason says so (the edge of stability: lower the learning rate), naming no knob."""
    jump = loss_jump(loss)
    if s.empty or jump is None or jump[0] > int(s["step"].max()):
        return
    text = finding(s, loss, True, inputs)
    verdict.configs.loc[verdict.configs["config_id"] == c.config_id, "reason"] = text
    if verdict.status == "inconclusive" and len(verdict.configs) == 1:
        verdict.reason = text


def explain(verdict: Any, frame: pd.DataFrame, facts: Sequence[Mapping[str, Any]], rules: Rules,
            findings_only: bool = False) -> None:
    """Everything after the series (module docstring), in place on ``verdict``."""
    series = verdict.series
    long = measured_facts(frame, facts, series, rules)
    verdict.audit = long
    eps = eps_table(frame, rules) if (frame["tensor"] == EPS_TENSOR).any() else pd.DataFrame()
    loss = frame[frame["tensor"] == "loss"]
    all_causes, used_all = [], set()
    findings: dict[str, str] = {}
    for c in verdict.configs.itertuples():
        cid = c.config_id
        s = series[series["config_id"] == cid]
        mine = long[long["config_id"] == cid]
        # an undecided configuration: what its undecided series would follow from, where a measured fact says so
        failing = _failing(s) if c.status == "fail" else _failing(s, "inconclusive") if c.status == "inconclusive" \
            else s.iloc[0:0]
        mine_loss = loss[loss["config_id"] == cid]
        jump = loss_jump(mine_loss)
        rows, used = _causes_of(cid, str(c.parametrization), mine, failing, s, rules.tol,
                                eps[eps["config_id"] == cid] if len(eps) else eps, None if jump is None else jump[0])
        all_causes += rows
        used_all |= used
        if c.status == "inconclusive" and not rows and len(mine):
            _unstable(verdict, c, failing, mine_loss, _inputs(frame, cid))
        if c.status == "fail" and not rows and len(failing) and len(mine):
            findings[cid] = finding(failing, mine_loss, len(mine) > 0, _inputs(frame, cid))
            all_causes.append(dict(config_id=cid, parametrization=str(c.parametrization), order=0, kind="candidates",
                                   what=str(failing.sort_values(["call_order", "step"])["module"].iloc[0]),
                                   modules=[str(failing.sort_values(["call_order", "step"])["module"].iloc[0])],
                                   measure="out", step=int(failing["step"].min()), exponent=np.nan, ci_low=np.nan,
                                   ci_high=np.nan, expected="", fix="no knob: " + findings[cid],
                                   line=findings[cid], direction=str(failing["direction"].iloc[0])))
    causes = pd.DataFrame(all_causes, columns=CAUSE_COLUMNS)
    structure = structure_causes(facts, series)
    if len(structure):
        named = {(r.config_id, m) for r in structure.itertuples() for m in r.modules}
        keep = [not all((cid, m) in named for m in ms) for cid, ms in zip(causes["config_id"], causes["modules"])]
        causes = pd.concat([structure, causes[np.asarray(keep, dtype=bool)]], ignore_index=True)
        causes["order"] = causes.groupby("config_id").cumcount().astype("int64")
    verdict.causes = causes.reset_index(drop=True)
    verdict.evidence = _evidence(long)
    _inherit(verdict, causes)
    _diagnoses(verdict, set(long["config_id"]))
    rows, notes = quiet(long, used_all, eps, rules.tol)
    verdict.quiet = pd.DataFrame(rows, columns=CAUSE_COLUMNS)
    verdict.notes += [*notes, *no_rule(long)]
    _lead(verdict, structure)


def _inputs(frame: pd.DataFrame, cid: str) -> dict[str, float]:
    """module -> the exponent in width of its input's rms (the gain rows' ``in_rms``) in configuration ``cid``."""
    g = frame[(frame["config_id"] == cid) & (frame["tensor"] == "gain") & (frame["stat"] == "in_rms")]
    return {str(m): fit_points(r["width"], r["value"], r["step"])[0] for m, r in g.groupby("module", sort=False)}


def _evidence(long: pd.DataFrame) -> pd.DataFrame:
    e = long[long["status"].isin(["pass", "fail", "inconclusive"]) & np.isfinite(long["exponent"].astype(float))]
    return pd.DataFrame({
        "config_id": e["config_id"], "parametrization": e["parametrization"], "name": e["parameter"],
        "measure": e["quantity"], "exponent": e["exponent"], "ci_low": e["ci_low"], "ci_high": e["ci_high"],
        "expected_low": e["expected_low"], "expected_high": e["expected_high"], "violates": e["status"] == "fail",
        "order": e["order"], "step": np.where(e["quantity"] == "init", 0, 1), "role": e["class"],
        "status": e["status"],
    }, columns=EVIDENCE_COLUMNS).reset_index(drop=True)


def _inherit(verdict: Any, causes: pd.DataFrame) -> None:
    """The module table's cause columns: a cause's module gets its ``what``; every other failing module the nearest
    cause upstream in call order (forward), with none, the first downstream (backward)."""
    mods = verdict.modules
    if mods.empty:
        return
    mods = mods.assign(cause="", inherited_from="", inherited_via="")
    order = verdict.series.groupby(["config_id", "module"])["call_order"].min()
    for cid, mine in causes.groupby("config_id", sort=False):
        at = sorted((float(order.get((cid, m), np.inf)), str(r.what)) for r in mine.itertuples() for m in r.modules)
        named = {m: str(r.what) for r in mine.itertuples() for m in r.modules}
        for idx in mods.index[mods["config_id"] == cid]:
            m = mods.at[idx, "module"]
            if m in named:
                mods.at[idx, "cause"] = named[m]
            elif mods.at[idx, "status"] == "fail" and at:
                o = float(order.get((cid, m), -1))
                up = [w for x, w in at if x <= o]
                mods.at[idx, "inherited_from"], mods.at[idx, "inherited_via"] = (
                    (up[-1], "forward") if up else (next(w for x, w in at if x > o), "backward"))
    verdict.modules = mods


def _diagnoses(verdict: Any, measured: set[str]) -> None:
    """Where the weights' facts were measured, a failing or undecided series says which cause it follows from (its
    module's, or the one it inherits from), or nothing — never the knob its rule would guess from the symptom, which
    the facts may contradict."""
    s, m = verdict.series, verdict.modules
    if s.empty or not measured or "cause" not in m:
        return
    c = verdict.causes
    seen = set(c.loc[c["kind"] == "candidates", "what"]) if len(c) else set()  # what was seen names no knob
    said = {(r.config_id, r.module): (r.cause or r.inherited_from) for r in m.itertuples()}
    said = {k: ("" if w in seen else w) for k, w in said.items()}
    # an op's series (a router's load, attention logits) follows from a cause named on the module that computed it
    named = [(r.config_id, m, str(r.what)) for r in c.itertuples() if r.kind != "candidates" for m in r.modules] \
        if len(c) else []
    for cid, module in set(zip(s["config_id"], s["module"])):
        home = _attention_home(str(module))
        if home is not None and not said.get((cid, module)):
            said[(cid, module)] = next(
                (w for c_, m, w in named if c_ == cid and (m == home or m.startswith(home + "."))), "")
    bad = s["config_id"].isin(measured) & s["status"].isin(["fail", "inconclusive"])
    verdict.series.loc[bad, "diagnosis"] = [
        f"follows from the cause {said[k]}" if said.get(k) else "" for k in zip(s.loc[bad, "config_id"],
                                                                                 s.loc[bad, "module"])]
    mb = m["config_id"].isin(measured) & m["status"].isin(["fail", "inconclusive"])
    verdict.modules.loc[mb, "diagnosis"] = [f"follows from the cause {said[k]}" if said.get(k) else ""
                                            for k in zip(m.loc[mb, "config_id"], m.loc[mb, "module"])]


def _lead(verdict: Any, structure: pd.DataFrame) -> None:
    """Each failing configuration's reason led by its first cause; the verdict's by the worst configuration's."""
    causes = verdict.causes
    if causes.empty or verdict.configs.empty:
        return
    for i, c in verdict.configs.iterrows():
        mine = causes[causes["config_id"] == c["config_id"]].sort_values("order", kind="stable")
        if mine.empty:
            continue
        if mine["kind"].iloc[0] == "structure":
            verdict.configs.loc[i, ["status", "reason"]] = ["fail", mine["line"].iloc[0]]
            continue
        if c["status"] == "inconclusive" and mine["kind"].iloc[0] != "candidates":
            more = "" if len(mine) < 2 else f"; {len(mine) - 1} more: " + ", ".join(
                f"{r.what} ({r.kind})" for r in mine.iloc[1:].itertuples())
            verdict.configs.loc[i, "reason"] = f"{c['reason']}; measured meanwhile: {mine['line'].iloc[0]}{more}"
            continue
        if c["status"] != "fail" or str(c["reason"]).startswith(("diverged", "the builder ignores", "widths ")):
            continue
        more = "" if len(mine) < 2 else f"; {len(mine) - 1} more cause(s): " + ", ".join(
            f"{r.what} ({r.kind})" for r in mine.iloc[1:].itertuples())
        n = verdict.series[(verdict.series["config_id"] == c["config_id"]) & verdict.series["in_window"].astype(bool)
                           & (verdict.series["status"] == "fail")]["module"].nunique()
        head = "cause: " if mine["kind"].iloc[0] != "candidates" else ""
        verdict.configs.loc[i, "reason"] = f"{head}{mine['line'].iloc[0]}{more}; {n} module(s) violate muP"
    worst = verdict.configs.loc[verdict.configs["status"].map(RANK).idxmax()]
    verdict.status = str(worst["status"]) if RANK[str(worst["status"])] >= RANK[verdict.status] else verdict.status
    if worst["status"] == verdict.status:
        verdict.reason = worst["reason"] if len(verdict.configs) == 1 else f"{worst['parametrization']}: " \
                                                                             f"{worst['reason']}"
