"""The engine that applies the rule table: each series gets its rule, its band, a status and, off the band, a cause.

Stage: judge (the first pass of the verdict over a slopes table). Input: the slopes of the judged statistic
(:func:`coordcheck.judge.slopes.fit_slopes`: one row per configuration, module, tensor, statistic and step, with the
slope against width and its 95% interval) and the frame they came from (its ``head_dim`` column). Output: the same
rows with the facts the rules read (``op``, the head dimension's growth, whether an output module is the model's
output), ``rule`` (the :class:`~coordcheck.judge.rules.Rule` that judged it), ``expect``, ``band_low``,
``band_high``, ``margin``, ``status``, ``direction`` and ``diagnosis``; and the verdict's notes of the rules that say
which modules they judged otherwise (:func:`rule_notes`). Never imports torch.

What is the same for every rule lives here, once: significance (a series fails only when its whole 95% interval is
outside the band; outside with an overlapping interval is inconclusive), zeros (exactly zero at every width: ``zero``;
at some widths only: inconclusive), non-finite values (fail, "diverged"), an undefined slope (inconclusive), and the
cause of an undecided series being only what it would mean ("not decided; if confirmed: ..."). What differs between
kinds of series is the table's (:data:`coordcheck.judge.rules.RULES`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from coordcheck.core.frame import QK_LOGITS
from coordcheck.judge.rules import DIVERGED, QK_INIT_SLOPE, RULES, Rule, Rules, expected_band

__all__ = ["head_dim_growth", "series_facts", "judge_by_table", "apply_rules", "rule_notes", "corroborate",
           "UNDECIDED_PREFIX", "HEAD_COLUMNS"]

UNDECIDED_PREFIX = "not decided; if confirmed: "  # an undecided series' diagnosis is what it would mean, not a cause
HEAD_COLUMNS = ["config_id", "module", "exponent", "kind", "dims"]


def head_dim_growth(frame: pd.DataFrame) -> pd.DataFrame:
    """How the head dimension of each captured attention module grows with width, from the frame's ``head_dim``.

    One row per (``config_id``, ``module``) of role ``attention`` with a recorded head dimension: ``exponent`` ``a``
    (least-squares slope of log2 head_dim vs log2 width, 0 when fixed), ``kind`` and ``dims`` (the head dimensions at
    the smallest and largest width, as text). The kinds (the rules ``qk-init-*`` say what each means for the step-0
    1/d_head test): ``grows`` (``a > 0``; ``a = 1`` when the number of heads is fixed), ``fixed`` (the same head
    dimension at every width: the number of heads grows), ``shrinks`` (``a < 0``: heads grow faster than width),
    ``unknown`` (some width has no recorded head dimension: a frame from before the column).
    """
    attn = frame[(frame["role"] == "attention") & (frame["tensor"] == "out")]
    if "head_dim" not in attn.columns or attn.empty:
        return pd.DataFrame(columns=HEAD_COLUMNS)
    per_width = attn.groupby(["config_id", "module", "width"], sort=True)["head_dim"].max().reset_index()
    rows = []
    for (cid, module), g in per_width.groupby(["config_id", "module"], sort=False):
        h, w = g["head_dim"].to_numpy(dtype=float), g["width"].to_numpy(dtype=float)
        if not (h > 0).any() and not module.endswith(QK_LOGITS):
            continue  # a capture that does not know its head dimension (a hand-written softmax's input)
        dims = f"{h[0]:.0f}" if (h == h[0]).all() else f"{h[0]:.0f} at width {w[0]:.0f} to {h[-1]:.0f} at width " \
                                                       f"{w[-1]:.0f}"
        if not (h > 0).all():
            a, kind = np.nan, "unknown"
        elif (h == h[0]).all():
            a, kind = 0.0, "fixed"
        else:
            x, y = np.log2(w), np.log2(h)
            a = float(np.polyfit(x, y, 1)[0]) if len(x) > 1 else 0.0
            kind = "grows" if a > 0 else "shrinks"
        rows.append((cid, module, a, kind, dims))
    return pd.DataFrame(rows, columns=HEAD_COLUMNS)


def series_facts(s: pd.DataFrame, heads: pd.DataFrame, rules: Rules) -> pd.DataFrame:
    """The facts the rules read, as columns of the series: ``op`` (``qk`` for captured pure q·k logits), one boolean
    ``fact_<name>`` per fact of :data:`coordcheck.judge.rules.FACTS`, and the fields their texts are formatted with
    (``head_exponent``, ``dims``, ``final``: the model's output module of the configuration)."""
    s = s.copy()
    s["op"] = np.where(s["module"].str.endswith(QK_LOGITS), "qk", "")
    hd = s[["config_id", "module"]].merge(heads if len(heads) else pd.DataFrame(columns=HEAD_COLUMNS),
                                          on=["config_id", "module"], how="left")
    kind = hd["kind"].fillna("").to_numpy()
    a = hd["exponent"].to_numpy(dtype=float)
    s["head_exponent"], s["dims"] = a, hd["dims"].fillna("").to_numpy()
    gap = -QK_INIT_SLOPE * np.nan_to_num(a)
    s["fact_head_grows"] = (kind == "grows") & (gap > rules.tol)
    s["fact_head_weak"] = (kind == "grows") & (gap <= rules.tol)
    for k in ("fixed", "shrinks", "unknown"):
        s[f"fact_head_{k}"] = kind == k
    out = s["role"] == "output"
    final = s[out].groupby("config_id")["call_order"].transform("max")
    # before the model's output and in its chain: nothing but output modules runs after it (logits, then a multiplier)
    last_other = s[~out].groupby("config_id")["call_order"].max()
    # (mapped through an empty Series the ids stay strings: to numbers first, as no series but outputs means -1)
    chained = s["call_order"] > pd.to_numeric(s["config_id"].map(last_other), errors="coerce").fillna(-1)
    s["fact_inner_output"] = out & (s["call_order"] < final.reindex(s.index)) & chained
    finals = s[out & ~s["fact_inner_output"]].groupby("config_id")["module"].first()
    final_of = s["config_id"].map(finals).astype(object)  # (no model output at all: NaN floats, not strings)
    s["final"] = final_of.where(final_of.notna(), "")
    return s


def _assign(s: pd.DataFrame, table: tuple[Rule, ...]) -> np.ndarray:
    """The name of the first rule of ``table`` that matches each series ('' where none does)."""
    col = {c: s[c].to_numpy(dtype=object) for c in ("tensor", "role", "op", "place_kind") if c in s.columns}
    step0 = s["step"].to_numpy() == 0
    rule = np.full(len(s), "", dtype=object)
    free = np.ones(len(s), dtype=bool)
    for r in table:
        m = free & np.isin(col["tensor"], r.tensors)
        if r.roles:
            m &= np.isin(col["role"], r.roles)
        if r.steps != "any":
            m &= step0 if r.steps == "init" else ~step0
        if r.ops:
            m &= np.isin(col["op"], r.ops)
        if r.places:
            m &= np.isin(col["place_kind"], r.places)
        for f in r.facts:
            m &= s[f"fact_{f}"].to_numpy(dtype=bool)
        rule[m], free = r.name, free & ~m
    return rule


def _band(expect: str, rules: Rules, a: float, role: str, tensor: str, step: int) -> tuple[float, float]:
    if expect == "as_width":  # the width verdict's band for this role, tensor and step
        expect = expected_band(role, tensor, step)
    if expect == "flat":
        return -rules.shrink_tol, rules.tol
    if expect == "qk_init":
        return -np.inf, QK_INIT_SLOPE * a + rules.tol
    if expect == "noisy_update":
        return -0.5 - rules.tol, rules.tol
    if expect == "shrink_half":
        return -np.inf, -0.5 + rules.tol
    if expect == "shown":
        return -np.inf, np.inf
    if expect == "no_shrink":
        return -rules.tol, np.inf
    return -np.inf, rules.tol


def _fields(row: Mapping[str, Any], rules: Rules) -> dict:
    """The values a rule's texts are formatted with (:class:`~coordcheck.judge.rules.Rule`)."""
    a = float(row.get("head_exponent", np.nan))
    a = a if np.isfinite(a) else 0.0
    return {"dims": row.get("dims", ""), "slope": QK_INIT_SLOPE * a, "power": "" if abs(a - 1) < 0.01 else f"^{a:.2f}",
            "a": a, "gap": -QK_INIT_SLOPE * a, "tol": rules.tol, "final": row.get("final", ""), "role": row["role"],
            "what": "output" if row["tensor"] == "out" else "change since step 0"}


def judge_by_table(s: pd.DataFrame, rules: Rules, table: tuple[Rule, ...] = RULES, axis: str = "width"
                   ) -> pd.DataFrame:
    """Each series of ``s`` judged by its rule of ``table`` (module docstring): ``s`` holds the slopes against
    ``axis`` and the facts its rules read (``op`` and ``fact_*`` for the width rules, ``place_kind`` for the depth
    rules)."""
    s = s.copy()
    s["rule"] = _assign(s, table)
    by_name = {r.name: r for r in table}
    rule_of = [by_name.get(n) for n in s["rule"]]
    s["expect"] = [r.expect if r is not None else "flat" for r in rule_of]
    a = np.nan_to_num(s["head_exponent"].to_numpy(dtype=float)) if "head_exponent" in s.columns else np.zeros(len(s))
    expect = s["expect"].to_numpy(dtype=object)
    bands = np.empty((len(s), 2))
    for e in np.unique(expect):  # one band per kind of expectation (as_width: per role, tensor and step)
        rows = np.flatnonzero(expect == e)
        if e == "as_width":
            keys = list(zip(s["role"].iloc[rows], s["tensor"].iloc[rows], s["step"].iloc[rows] == 0))
            bands[rows] = [_band("as_width", rules, 0.0, role, t, 0 if init else 1) for role, t, init in keys]
        elif e == "qk_init":
            bands[rows, 0], bands[rows, 1] = -np.inf, QK_INIT_SLOPE * a[rows] + rules.tol
        else:
            bands[rows] = _band(e, rules, 0.0, "", "", 0)
    s["band_low"], s["band_high"] = bands[:, 0], bands[:, 1]
    slope, ci_lo, ci_hi = s["slope"].to_numpy(), s["ci_low"].to_numpy(), s["ci_high"].to_numpy()
    lo_band, hi_band = bands[:, 0], bands[:, 1]
    grows, shrinks = slope > hi_band, slope < lo_band
    s["margin"] = np.minimum(hi_band - slope, slope - lo_band)  # distance to the band's nearest edge; < 0 outside
    sig = np.where(grows, ci_lo > hi_band, np.where(shrinks, ci_hi < lo_band, False))  # the whole interval outside
    status = np.where(grows | shrinks, np.where(sig, "fail", "inconclusive"), "pass").astype(object)
    direction = np.where(grows, "grows", np.where(shrinks, "shrinks", "")).astype(object)
    note = np.full(len(s), "", dtype=object)
    status = np.where(s["all_zero"], "zero", status)
    note = np.where(s["all_zero"], f"exactly zero at every {axis}", note)
    partial = (s["any_zero"] & ~s["all_zero"] & ~s["nonfinite"]).to_numpy()
    status = np.where(partial, "inconclusive", status)
    note = np.where(partial, f"exactly zero at some {axis}s only", note)
    undefined = ~s["nonfinite"].to_numpy() & ~s["any_zero"].to_numpy() & np.isnan(slope)
    status, note = np.where(undefined, "inconclusive", status), np.where(undefined, "slope undefined", note)
    shown = np.array([r is not None and not r.judged for r in rule_of])
    status, direction = np.where(shown, "skip", status), np.where(shown, "", direction)
    nonfinite = s["nonfinite"].to_numpy()  # a non-finite value fails, judged or shown: "diverged"
    status, direction = np.where(nonfinite, "fail", status), np.where(nonfinite, "diverged", direction)
    diagnosis = list(note)
    texts = [(i, r.cause(d, par) if d else r.note) for i, (r, d, n, par) in
             enumerate(zip(rule_of, direction, note, s["parametrization"]))
             if r is not None and d != "diverged" and (d or (r.note and (not r.judged or not n)))]
    columns = [c for c in ("head_exponent", "dims", "final", "role", "tensor") if c in s.columns]
    rows = s.iloc[[i for i, _ in texts]][columns].to_dict("records") if texts else []
    for (i, text), row in zip(texts, rows):  # only the rows that say something are formatted
        diagnosis[i] = text.format(**_fields(row, rules))
    for i in np.flatnonzero(direction == "diverged"):
        diagnosis[i] = DIVERGED
    s["status"], s["direction"], s["diagnosis"] = status, direction, diagnosis
    undecided = (s["status"] == "inconclusive") & (s["diagnosis"] != "") & (s["direction"] != "")
    if undecided.any():  # (an empty selection of an all-empty text column comes back as floats in pandas 3.1)
        s.loc[undecided, "diagnosis"] = UNDECIDED_PREFIX + s.loc[undecided, "diagnosis"]
    return s


def apply_rules(slopes: pd.DataFrame, rules: Rules, heads: pd.DataFrame) -> pd.DataFrame:
    """Each series of a width verdict's ``slopes`` judged by its rule (:data:`coordcheck.judge.rules.RULES`), with
    the facts the rules read; ``heads``: :func:`head_dim_growth`."""
    return judge_by_table(series_facts(slopes, heads, rules), rules, RULES, "width")


def rule_notes(series: pd.DataFrame, rules: Rules) -> list[str]:
    """``Verdict.notes`` of the rules that ``tell``: one per (configuration, rule, what it says), naming the modules
    (a head dimension fixed across widths: the step-0 1/d_head test not applied, and why)."""
    told = {r.name for r in RULES if r.tell}
    mine = series[series["rule"].isin(told)]
    if mine.empty:
        return []
    many = series["config_id"].nunique() > 1
    by_name = {r.name: r for r in RULES}
    notes = []
    for (cid, name, par, *_), g in mine.groupby(["config_id", "rule", "parametrization", "dims", "head_exponent"],
                                                sort=False, dropna=False):
        text = by_name[name].note.format(**_fields(g.iloc[0], rules))
        names = list(dict.fromkeys(g["module"]))
        listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        notes.append(f"{par + ': ' if many else ''}{listed}: {text}")
    return notes


def corroborate(series: pd.DataFrame) -> pd.DataFrame:
    """A failing series of a rule with ``corroborate`` (an own update after steps) counts only where the same module's
    series of those tensors also fail, in the same direction, inside the stability window; otherwise it is
    ``inconclusive`` and its diagnosis is the rule's ``alone`` (so it decides nothing: only ``out`` and ``delta`` make a
    configuration undecided). An own update off the band alone names no knob: a real fault moves the module's output
    with it (the measurements are the rules' sources)."""
    needs = {r.name: r for r in RULES if r.corroborate}
    cand = series["rule"].isin(needs) & (series["status"] == "fail") & series["direction"].isin(["grows", "shrinks"])
    if not cand.any():
        return series
    alone = pd.Series(False, index=series.index)
    for name, rule in needs.items():
        mine = cand & (series["rule"] == name)
        if not mine.any():
            continue
        acts = series[series["in_window"] & series["tensor"].isin(rule.corroborate) & (series["status"] == "fail")]
        shown = set(zip(acts["config_id"], acts["module"], acts["direction"]))
        alone |= mine & ~pd.Series([k in shown for k in zip(series["config_id"], series["module"],
                                                             series["direction"])], index=series.index)
    if not alone.any():
        return series
    series = series.copy()
    rows = series.loc[alone]
    series.loc[alone, "diagnosis"] = [needs[r].alone.format(direction=d, slope=sl, step=st) for r, d, sl, st in
                                      zip(rows["rule"], rows["direction"], rows["slope"], rows["step"])]
    series.loc[alone, "status"] = "inconclusive"
    return series
