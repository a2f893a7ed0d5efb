"""The facts, measured: each parameter's effective init, its update and its module's multiplier, as exponents in width,
against what muP expects of its class under the optimizer that trains it.

Stage: judge (beside the series; before the causes, :mod:`coordcheck.judge.explain`). Input: the tidy frame's
``weight``, ``update`` and ``gain`` rows (:mod:`coordcheck.record.weights`: what training did, measured from the
weights), its ``eps`` rows where recorded, the jobs' facts (the parameters' shapes at each width, the optimizer kind
of each parameter's group and the hyperparameters it declared) and the judged series (where the model's output sits
after its readout). Output: :func:`measured_facts`, one row per (configuration, parameter, quantity)
(:data:`LONG_COLUMNS`), and :func:`audit_table`, one per parameter.

The quantities, each measured at every width and fitted as an exponent in width (least squares of log2 value on log2
width over every (width, seed, step) point, the steps' offsets removed, with a 95 % interval):

* ``mult`` — the module's multiplier: its output over its weight applied to its own input (``gain`` rows whose fit
  explains ≥ :data:`FIT_MIN` of the output), times, for the model's readout, what scales it outside its module: the
  model's output over the readout's (a multiplier in a parent's ``forward``: from the judged series) and its input's
  scale (a multiplier before it). Shown, not judged: it enters the two below.
* ``init`` — the effective init: rms(W₀) times the multiplier. muP: hidden ∝ fan_in^-1/2, input-like constant,
  output-like ∝ 1/fan_in or zero, vectors constant or smaller (Tensor Programs V, Table 3).
* ``lr`` — the effective update of a step, by the optimizer that trains it: Adam-like, rms(ΔW) times the multiplier
  (Adam's step is ±lr per coordinate: the effective lr); SGD, −⟨ΔW, ∇⟩/‖∇‖² times the multiplier squared (the
  applied lr on the effective weight; at the first update, where momentum's buffer is the gradient itself); Muon and
  any optimizer the harness does not know, the spectral condition of Yang,
  Simon & Bernstein 2023 (arXiv 2310.17813): ‖ΔW‖₂ times the multiplier over √(fan_out/fan_in), flat in width. The
  learning rate the step's group held is its label (``declared``), which says whether the knob is the learning rate
  (the update follows it) or Adam's ε (the update falls short of it).
* ``wd`` and ``adam_eps`` — declared, never a cause in a coordinate check (nothing in ten steps can show them):
  judged into notes with their forecast (:mod:`coordcheck.judge.explain`).

A quantity **violates** when its exponent is outside its band and so is its whole interval (``status`` fail, with a
``direction``); outside with an overlapping interval is ``inconclusive``; exactly zero at every width is ``zero``.
Never imports torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from coordcheck.core.frame import EPS_TENSOR, GAIN_TENSOR, UPDATE_TENSOR, WEIGHT_TENSOR
from coordcheck.judge.rules import Rules
from coordcheck.judge.slopes import t_quantile
from coordcheck.record.shapes import dim_growth, growth_text, param_class

__all__ = ["CAUSE_COLUMNS", "EVIDENCE_COLUMNS", "LONG_COLUMNS", "NO_RULE", "TABLE_COLUMNS", "QUANTITIES", "EXPECTED",
           "FIT_MIN", "WHAT", "ADAM", "measured_facts",
           "audit_table", "fit_points", "num"]

# The schemas of Verdict.causes and Verdict.evidence (coordcheck.judge.explain), here below everything that writes them
CAUSE_COLUMNS = ["config_id", "parametrization", "order", "kind", "what", "modules", "measure", "step", "exponent",
                 "ci_low", "ci_high", "expected", "fix", "line", "direction"]  # direction: grows / shrinks
EVIDENCE_COLUMNS = ["config_id", "parametrization", "name", "measure", "exponent", "ci_low", "ci_high",
                    "expected_low", "expected_high", "violates", "order", "step", "role", "status"]
QUANTITIES = ("init", "lr", "wd", "adam_eps", "mult")
NO_RULE = ("no established muP rule: a vector owned by a module of no known op (a selective scan's step size dt_bias, "
           "decay A_log, skip D; Vankadara et al., NeurIPS 2024, 'On Feature Learning in Structured State Space "
           "Models': muP's rules do not carry over to the scan) — measured, not judged")
WHAT = {"init": "effective init", "lr": "update", "wd": "weight decay", "adam_eps": "Adam ε", "mult": "multiplier"}
FIT_MIN = 0.99  # a module's output is its weight applied to its input times a constant: the multiplier is measured
QUIET_STEP = 0.1  # a step whose update is under this share of the parameter's largest is left out of its fit: behind a
# zero-initialised readout the first update is zero, or weight decay alone (Muon's lr·λ·W: 2 % of its later steps)
ADAM = ("adam", "adamw")
KNOWN = (*ADAM, "sgd", "muon")
LONG_COLUMNS = ["config_id", "parametrization", "parameter", "module", "order", "role", "class", "family", "dims",
                "grows", "min_width", "max_width", "wd_kind", "quantity", "value", "declared", "gain", "first",
                "exponent", "ci_low", "ci_high", "expected", "expected_low",
                "expected_high", "status", "direction", "reason", "how"]

_TP5 = "Tensor Programs V, Table 3"
_SPECTRAL = "spectral condition ‖ΔW‖₂ ∝ √(fan_out/fan_in) (Yang, Simon & Bernstein 2023)"
# (optimizer family or "*", class, quantity) -> ((c_in, c_out, c_main), band, reason): the expected exponent is
# c_in·a_in + c_out·a_out + c_main·a_main (each dimension's growth exponent in width; a_main: mup's main dimension,
# the fan-in of a matrix). "flat": expected ± tol; "no_growth": at most expected + tol. Absent: not judged.
EXPECTED: dict[tuple[str, str, str], tuple[tuple[float, float, float], str, str]] = {
    ("*", "hidden", "init"): ((-0.5, 0, 0), "flat", f"std ∝ fan_in^-1/2: an output coordinate sums fan_in terms "
                                                    f"({_TP5})"),
    ("*", "input-like", "init"): ((0, 0, 0), "flat", f"its fan-in is fixed: std constant in width ({_TP5})"),
    ("*", "output-like", "init"): ((0, 0, -1), "flat", f"an output weight: std × multiplier ∝ 1/fan_in, or zero "
                                                       f"({_TP5}; between the two, a readout's backward signal at the "
                                                       f"first updates shrinks with width)"),
    ("*", "vector", "init"): ((0, 0, 0), "no_growth", "biases and norm gains: constant in width, or smaller"),
    ("*", "fixed", "init"): ((0, 0, 0), "no_growth", "no dimension grows: constant, or smaller"),
    **{(f, "hidden", "lr"): ((0, 0, -1), "flat", f"Adam's step is ±lr per coordinate: a hidden matrix's lr ∝ 1/fan_in "
                                                 f"(MuAdam: lr / width_mult; {_TP5})") for f in ADAM},
    **{(f, c, "lr"): ((0, 0, 0), "flat", "a vector-like parameter keeps the base lr (MuAdam)")
       for f in ADAM for c in ("input-like", "vector", "fixed")},
    **{(f, "output-like", "lr"): ((0, 0, -1), "flat", "an output weight's effective step ∝ 1/fan_in: the base lr "
                                                      "behind a 1/width multiplier, or lr ∝ 1/fan_in without one "
                                                      f"({_TP5})") for f in ADAM},
    ("sgd", "hidden", "lr"): ((-1, 1, 0), "flat", f"SGD: a hidden matrix's lr ∝ fan_out/fan_in (MuSGD; {_TP5})"),
    ("sgd", "input-like", "lr"): ((0, 0, 1), "flat", f"SGD: an input weight's lr ∝ width (MuSGD; {_TP5})"),
    ("sgd", "vector", "lr"): ((0, 0, 1), "flat", "SGD: a vector's lr ∝ width (MuSGD)"),
    ("sgd", "fixed", "lr"): ((0, 0, 0), "flat", "SGD: no dimension grows: the base lr"),
    ("sgd", "output-like", "lr"): ((0, 0, -1), "flat", f"SGD: an output weight's effective lr ∝ 1/fan_in (MuSGD: lr × "
                                                       f"width behind a 1/width multiplier; {_TP5})"),
    ("muon", "hidden", "lr"): ((0, 0, 0), "flat", _SPECTRAL + ": Muon's orthogonalised step has ‖ΔW‖₂ = lr"),
    **{("other", c, "lr"): ((0, 0, 0), "flat", _SPECTRAL) for c in ("hidden", "input-like", "output-like")},
    # declared: notes only (explain.py)
    ("adam", "hidden", "wd"): ((0, 0, 1), "flat", "MuAdam multiplies a hidden matrix's (coupled) weight decay by "
                                                  "width_mult"),
    **{(f, c, "wd"): ((0, 0, 0), "flat", "the per-step shrink lr·λ constant in width (MuAdamW)")
       for f in ("adamw", "muon") for c in ("hidden", "input-like", "output-like", "vector", "fixed")},
    **{("adam", c, "wd"): ((0, 0, 0), "flat", "MuAdam keeps a vector-like parameter's weight decay")
       for c in ("input-like", "output-like", "vector", "fixed")},
    **{(f, c, "adam_eps"): ((0, 0, 0), "no_growth", "Adam's ε constant or shrinking (Everett et al. 2024)")
       for f in ADAM for c in ("hidden", "input-like", "output-like", "vector", "fixed")},
}


def num(x: float) -> str:
    """``+0.50``; ``+0.00`` for a value that rounds to zero from below."""
    return f"{round(float(x), 2) + 0.0:+.2f}"


def fit_points(widths: np.ndarray, values: np.ndarray, groups: np.ndarray | None = None,
               exact: bool = False) -> tuple[float, float, float]:
    """Slope of log2 value on log2 width with one offset per group (a step: its schedule, its seed), and its 95 %
    interval; NaN where fewer than two widths have positive finite values. ``exact``: a value the optimizer set
    (a label), whose interval is its slope."""
    w = np.asarray(widths, dtype=float)
    v = np.asarray(values, dtype=float)
    g = np.zeros(len(v)) if groups is None else np.asarray(groups)
    ok = np.isfinite(v) & (v > 0)
    if len(np.unique(w[ok])) < 2:
        return np.nan, np.nan, np.nan
    x, y = np.log2(w[ok]), np.log2(v[ok])
    _, gi = np.unique(g[ok], return_inverse=True)
    widths_in = np.array([len(np.unique(x[gi == k])) for k in range(gi.max() + 1)])
    keep = widths_in[gi] >= 2  # a group (a step) with two widths or more
    if not keep.any():
        return np.nan, np.nan, np.nan
    x, y, gi = x[keep], y[keep], np.unique(gi[keep], return_inverse=True)[1]
    n = np.bincount(gi)
    x = x - (np.bincount(gi, x) / n)[gi]
    y = y - (np.bincount(gi, y) / n)[gi]
    sxx = float((x * x).sum())
    slope = round(float((x * y).sum() / sxx), 9) + 0.0
    dof = len(x) - len(n) - 1
    if exact:
        return slope, slope, slope
    if dof < 1:
        return slope, np.nan, np.nan
    se = float(np.sqrt(((y - slope * x) ** 2).sum() / dof / sxx))
    half = float(t_quantile(np.array([dof]))[0]) * se
    return slope, slope - half, slope + half


def _judge(e: float, lo_ci: float, hi_ci: float, expected: float, band: str, tol: float
           ) -> tuple[float, float, str, str]:
    """``(expected_low, expected_high, status, direction)`` of one exponent."""
    lo, hi = (expected - tol if band == "flat" else -np.inf), expected + tol
    if not np.isfinite(e):
        return lo, hi, "inconclusive", ""
    if lo <= e <= hi:
        return lo, hi, "pass", ""
    direction = "grows" if e > hi else "shrinks"
    sig = np.isfinite(lo_ci) and (lo_ci > hi or hi_ci < lo)
    return lo, hi, ("fail" if sig else "inconclusive"), direction


def _params(facts: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, dict[int, Mapping[str, Any]]]]:
    """config_id -> parameter -> width -> {dims, embedding, family, eps, wd, wd_kind} (the audit's, else the
    shapes' alone)."""
    out: dict[str, dict[str, dict[int, Mapping[str, Any]]]] = {}
    for f in facts:
        if f.get("width") is None:
            continue
        cid, width = str(f.get("config_id")), int(f["width"])
        audit = (f.get("audit") or {}).get("params") or {}
        shapes = f.get("shapes") or {}
        for name in (audit or shapes):
            p = dict(audit.get(name) or {"dims": list(shapes.get(name, []))})
            out.setdefault(cid, {}).setdefault(name, {}).setdefault(width, p)
    return out


def _fans(dims: list[int], embedding: bool) -> tuple[float, float]:
    """(fan_in, fan_out) of a matrix: ``nn.Linear``'s (out, in), an embedding's (num, dim), a stack's last two, a
    convolution's (out, in × kernel)."""
    if embedding:
        return float(dims[0]), float(dims[1])
    if len(dims) == 3:
        return float(dims[2]), float(dims[1])
    return float(np.prod(dims[1:])), float(dims[0])


def _readout_outside(series: pd.DataFrame, readout: str, gains: Mapping[str, tuple], rules: Rules
                     ) -> tuple[float, float, str]:
    """``(before, after, how)``: the exponents of what scales the readout outside its own module. Before it, on its
    input: the rms of what it reads against the output of the module that runs before it (:func:`_feeding`), so a
    scale of width^±1/2 or more between the two is a multiplier (``h * alpha / width_mult``; narrow widths move Θ(1)
    features by less: the built-in MLP's readout input +0.24 over widths 64-256), and features that grow upstream are
    not. After it, the model's output over the
    readout's (a multiplier in a parent's ``forward``): from the judged series, the median over steps of the two
    slopes' difference. A bias of the readout's is scaled by the one after it only."""
    before, how = 0.0, []
    x = gains[readout][4] if readout in gains else np.nan
    feeds = _feeding(series, readout)  # the module that runs before it: what its input is made of
    if np.isfinite(x) and abs(x - feeds) >= 0.5:
        before = x - feeds
        how.append(f"its input's rms ∝ width^{num(x)}" + (f" where the module before it gives width^{num(feeds)}"
                                                          if feeds else ""))
    outs = series[(series["role"] == "output") & (series["tensor"] == "out")]
    last = str(outs.loc[outs["call_order"].idxmax(), "module"]) if len(outs) else readout
    if last == readout:
        return before, 0.0, "; ".join(how)
    mine = lambda m: outs[(outs["module"] == m) & np.isfinite(outs["slope"].astype(float))  # noqa: E731
                          & ~outs["all_zero"].astype(bool)].set_index("step")["slope"]
    both = mine(last).to_frame("o").join(mine(readout).to_frame("r"), how="inner")
    if both.empty:
        return before, np.nan, "; ".join([*how, f"{last} over {readout}: not measured"])
    a = float((both["o"] - both["r"]).median())
    how.append(f"{last}'s output over {readout}'s ∝ width^{num(a)}")
    return before, a, "; ".join(how)


def _feeding(series: pd.DataFrame, readout: str) -> float:
    """The exponent of the output of the module that runs just before ``readout`` (its median slope over the steps;
    0 where there is none): what the readout's input is made of, so that its input's scale beyond it is a multiplier
    and not features that grow upstream."""
    out = series[(series["tensor"] == "out") & (series["role"] != "attention")]
    at = out.loc[out["module"] == readout, "call_order"]
    if at.empty:
        return 0.0
    before = out[out["call_order"] < at.min()]
    if before.empty:
        return 0.0
    last = before[before["call_order"] == before["call_order"].max()]
    slope = last["slope"].astype(float)
    slope = slope[np.isfinite(slope)]
    return float(slope.median()) if len(slope) else 0.0


def _family(p: Mapping[str, Any]) -> str:
    fam = str(p.get("family", "") or "")
    return fam if fam in KNOWN else "other"


def _tied(facts: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """config_id -> {alias: parameter} of the weights one module shares with another (a readout tied to the
    embedding): the jobs' ``tied`` facts."""
    out: dict[str, dict[str, str]] = {}
    for f in facts:
        out.setdefault(str(f.get("config_id")), {}).update(f.get("tied") or {})
    return out


def measured_facts(frame: pd.DataFrame, facts: Iterable[Mapping[str, Any]], series: pd.DataFrame,
                   rules: Rules | None = None) -> pd.DataFrame:
    """One row per (configuration, parameter, quantity) measured (:data:`LONG_COLUMNS`; module docstring). A weight
    a readout shares with the embedding is judged twice: as the embedding's, and as the readout's under the readout
    module's name (``lm_head.weight``), with the readout's multiplier."""
    rules = rules or Rules()
    facts = list(facts)
    params, tied = _params(facts), _tied(facts)
    fr = frame[frame["tensor"].isin([WEIGHT_TENSOR, UPDATE_TENSOR, GAIN_TENSOR, EPS_TENSOR])]
    rows: list[dict] = []
    for cid, f in fr.groupby("config_id", sort=False):
        mine = dict(params.get(str(cid), {}))
        par = str(f["parametrization"].iloc[0])
        s = series[series["config_id"] == cid] if len(series) else series
        gains = _gains(f[f["tensor"] == GAIN_TENSOR])
        up = f[f["tensor"] == UPDATE_TENSOR].pivot_table(index=["module", "width", "seed", "step"], columns="stat",
                                                         values="value", aggfunc="first")
        w0 = f[(f["tensor"] == WEIGHT_TENSOR) & (f["stat"] == "rms") & (f["step"] == 0)]
        w0_of = {str(k): g for k, g in w0.groupby("module", sort=False)}
        up_of = {str(k): g.droplevel(0) for k, g in up.groupby(level=0, sort=False)}
        lay = f[f["tensor"].isin([WEIGHT_TENSOR, UPDATE_TENSOR])].drop_duplicates("module").set_index("module")
        place = {n: (int(r.call_order), str(r.role)) for n, r in lay.iterrows()}  # parameter -> its owner's
        source = {n: n for n in place}  # parameter (or alias) -> the parameter whose rows it reads
        g_lay = f[f["tensor"] == GAIN_TENSOR].drop_duplicates("module").set_index("module")
        for alias, target in tied.get(str(cid), {}).items():
            module = alias.rpartition(".")[0] or "(root)"
            if target in place and module in g_lay.index and target in mine:
                place[alias] = (int(g_lay.at[module, "call_order"]), str(g_lay.at[module, "role"]))
                source[alias] = target
                mine[alias] = {w: {**p, "embedding": False} for w, p in mine[target].items()}
        readout = _readout(mine, place)
        before, after, after_how = _readout_outside(s, readout, gains, rules) if readout else (0.0, 0.0, "")
        for name, (order, role) in place.items():
            by_width = mine.get(name, {})
            widths = sorted(by_width)
            if len(widths) < 2:
                continue
            growth = dim_growth({w: list(by_width[w].get("dims") or []) for w in widths})
            wide = by_width[widths[-1]]
            cls, a_in, a_out, a_main = param_class(growth, bool(wide.get("embedding")))
            family = _family(wide)
            module = name.rpartition(".")[0] or "(root)"
            base = dict(config_id=cid, parametrization=par, parameter=name, module=module, wd_kind="",
                        order=order, role=role, **{"class": cls},
                        family=family if family != "other" else str(wide.get("family", "") or "unknown"),
                        dims=" → ".join(dict.fromkeys("x".join(map(str, by_width[w].get("dims") or []))
                                                      for w in widths)),
                        grows=growth_text(growth), min_width=widths[0], max_width=widths[-1])
            a = (a_in, a_out, a_main)
            matrix = len(wide.get("dims") or []) >= 2
            # the multiplier: its module's gain (a matrix); for the readout, times what scales it outside the module
            g_exp, g_lo, g_hi, g_how = gains.get(module, (0.0, 0.0, 0.0, ""))[:4] if matrix else (0.0, 0.0, 0.0, "")
            outside = (before if matrix else 0.0) + (after if np.isfinite(after) else 0.0)
            if module == readout and outside:
                g_exp, g_lo, g_hi = g_exp + outside, g_lo + outside, g_hi + outside
            if module == readout:
                g_how = "; ".join(x for x in (g_how, after_how) if x)
            if matrix and module in gains or (module == readout and outside):
                rows.append({**base, "quantity": "mult", "value": np.nan, "declared": np.nan, "gain": g_exp,
                             "first": np.nan, "exponent": g_exp, "ci_low": g_lo, "ci_high": g_hi, "expected": np.nan,
                             "expected_low": np.nan, "expected_high": np.nan, "status": "", "direction": "",
                             "reason": "measured", "how": g_how})
            unmeasured = matrix and module not in gains and module in g_lay.index
            src = source[name]
            mine_rows = _init_rows(base, w0_of.get(src, w0.iloc[0:0]), g_exp, a, family, rules, unmeasured, g_how)
            if src in up_of:
                mine_rows += _update_rows(base, up_of[src], g_exp, a, family, by_width,
                                          bool(wide.get("embedding")), rules, unmeasured)
            if src == name:
                mine_rows += _declared_rows(base, by_width, up_of.get(name), a, family, rules)
            # a scan's (two or more vectors of a module of no known op; its heads fixed in width, a bottleneck's, they
            # are fixed-size — not the root's own scalars): measured, not judged, ε too
            if wide.get("owner", None) == "" and (cls == "vector" or cls == "fixed" and "." in name):
                for r in mine_rows:
                    r.update(status="not judged" if r["status"] != "zero" else "zero", direction="", reason=NO_RULE)
            rows += mine_rows
    df = pd.DataFrame(rows, columns=LONG_COLUMNS)
    return df.astype({"order": "int64", "exponent": "float64", "value": "float64", "declared": "float64",
                      "gain": "float64", "first": "float64"})


def _gain_modules(f: pd.DataFrame) -> set[str]:
    return set(f.loc[f["tensor"] == GAIN_TENSOR, "module"])


def _gains(g: pd.DataFrame) -> dict[str, tuple[float, float, float, str, float]]:
    """module -> (exponent, ci_low, ci_high, how, its input's rms exponent) of its gain, over the steps where its fit
    is good at every width."""
    if g.empty:
        return {}
    p = g.pivot_table(index=["module", "width", "seed", "step"], columns="stat", values="value", aggfunc="first")
    p = p.reindex(columns=list(dict.fromkeys([*p.columns, "gain", "fit", "in_rms"])))  # an all-NaN stat kept
    out = {}
    for module, m in p.groupby(level=0, sort=False):
        m = m.reset_index()
        good = m[(m["fit"] >= FIT_MIN) & np.isfinite(m["gain"]) & (m["gain"] != 0)]
        good = good[good.groupby("step")["width"].transform("nunique") == m["width"].nunique()]
        if good.empty:
            continue
        e, lo, hi = fit_points(good["width"], good["gain"].abs(), good["step"])
        if not np.isfinite(lo):
            lo = hi = e
        x = fit_points(m["width"], m["in_rms"], m["step"])[0] if "in_rms" in m else np.nan
        out[str(module)] = (e, lo, hi, f"{module}'s output over its weight applied to its input ∝ width^{num(e)}", x)
    return out


def _readout(params: Mapping[str, Mapping[int, Mapping[str, Any]]], place: Mapping[str, tuple[int, str]]
             ) -> str | None:
    """The model's readout: the last output-role module (in call order) that owns (or shares) an output-like
    matrix."""
    best = None
    for name, by_width in params.items():
        if name not in place or place[name][1] != "output":
            continue
        widths = sorted(by_width)
        dims = [list(by_width[w].get("dims") or []) for w in widths]
        if len(widths) < 2 or any(len(d) != 2 for d in dims) or by_width[widths[-1]].get("embedding"):
            continue
        if dims[0][1] != dims[-1][1] and dims[0][0] == dims[-1][0]:
            if best is None or place[name][0] > best[0]:
                best = (place[name][0], name.rpartition(".")[0] or "(root)")
    return None if best is None else best[1]


def _expected(family: str, cls: str, quantity: str, a: tuple[float, float, float]
              ) -> tuple[float, str, str] | None:
    exp = EXPECTED.get((family, cls, quantity)) or EXPECTED.get(("*", cls, quantity))
    if exp is None:
        return None
    (ci, co, cm), band, reason = exp
    return ci * a[0] + co * a[1] + cm * a[2], band, reason


def _row(base: dict, quantity: str, value: float, declared: float, fit: tuple[float, float, float],
         expected: tuple[float, str, str] | None, tol: float, how: str, status: str | None = None,
         gain: float = 0.0) -> dict:
    e, lo, hi = fit
    base = {"first": np.nan, **base, "gain": gain}
    if expected is None:
        return {**base, "quantity": quantity, "value": value, "declared": declared, "exponent": e, "ci_low": lo,
                "ci_high": hi, "expected": np.nan, "expected_low": np.nan, "expected_high": np.nan,
                "status": status or "", "direction": "", "reason": "no muP rule for this class and optimizer",
                "how": how}
    x, band, reason = expected
    b_lo, b_hi, judged, direction = _judge(e, lo, hi, x, band, tol)
    return {**base, "quantity": quantity, "value": value, "declared": declared, "exponent": e, "ci_low": lo,
            "ci_high": hi, "expected": x, "expected_low": b_lo, "expected_high": b_hi,
            "status": status or judged, "direction": "" if status else direction, "reason": reason, "how": how}


def _init_rows(base: dict, w0: pd.DataFrame, g: float, a: tuple, family: str, rules: Rules, unmeasured: bool,
               g_how: str) -> list[dict]:
    if w0.empty:
        return []
    by = w0.groupby("width")["value"].median()
    if (by == 0).all():
        return [_row(base, "init", 0.0, np.nan, (np.nan,) * 3, _expected(family, base["class"], "init", a),
                     rules.tol, "zero at every width", status="zero")]
    raw = fit_points(w0["width"], w0["value"], exact=False)
    fit = (raw[0] + g, raw[1] + g, raw[2] + g) if np.isfinite(raw[1]) else (raw[0] + g,) * 3
    how = f"rms(W₀) ∝ width^{num(raw[0])}" + (f" × multiplier ∝ width^{num(g)}" if g else "")
    status = "not judged" if unmeasured else ("inconclusive" if (by == 0).any() else None)
    if unmeasured:
        how += "; its multiplier is not measured (its output is not its weight applied to its input times a constant)"
    return [_row(base, "init", float(by.iloc[-1]), raw[0], fit, _expected(family, base["class"], "init", a),
                 rules.tol, how, status, gain=g)]


def _update_rows(base: dict, up: pd.DataFrame, g: float, a: tuple, family: str,
                 by_width: Mapping[int, Mapping[str, Any]], embedding: bool, rules: Rules,
                 unmeasured: bool) -> list[dict]:
    """The update of each measured step as the optimizer family measures it (module docstring)."""
    u = up.reset_index()
    matrix = len(next(iter(by_width.values())).get("dims") or []) >= 2
    if family in ADAM or (family == "other" and not matrix):
        stat, k, what = "rms", 1.0, "rms(ΔW)"
    elif family == "sgd":
        stat, k, what = "sgd_lr", 2.0, "−⟨ΔW, ∇⟩/‖∇‖²"
    else:
        stat, k, what = "spec", 1.0, "‖ΔW‖₂/√(fan_out/fan_in)"
    if stat not in u or not matrix and family == "other":
        return []
    v = u[stat].astype(float)
    if stat == "spec":
        fans = {w: _fans(list(by_width[w].get("dims") or []), embedding) for w in by_width}
        v = v * np.sqrt([fans[w][0] / fans[w][1] if w in fans else np.nan for w in u["width"]])
    keep = u.assign(v=v)
    zero_steps = keep.groupby("step")["v"].transform(lambda s: (s.abs() == 0).any() | s.isna().any())
    keep = keep[~zero_steps]
    moved = keep["rms"].abs() if "rms" in keep else keep["v"].abs()  # how far the weights moved
    size = moved.groupby(keep["step"]).transform("median")
    keep = keep[size >= QUIET_STEP * size.max()] if len(keep) else keep  # behind a zero readout: weight decay alone
    if family == "sgd" and len(keep):  # the first update: SGD's momentum buffer is then the gradient itself
        keep = keep[keep["step"] == keep["step"].min()]
    if keep.empty:
        zero = u.assign(v=v)["v"].abs().max() == 0
        return [_row(base, "lr", 0.0, np.nan, (np.nan,) * 3, _expected(family, base["class"], "lr", a), rules.tol,
                     "no update at any measured step", status="zero" if zero else "inconclusive")]
    raw = fit_points(keep["width"], keep["v"].abs(), keep["step"])
    fit = tuple(x + k * g for x in raw) if np.isfinite(raw[1]) else (raw[0] + k * g,) * 3
    lab = fit_points(keep["width"], keep["lr"].abs(), keep["step"], exact=True) if "lr" in keep else (np.nan,) * 3
    how = f"{what} ∝ width^{num(raw[0])}" + (f" × multiplier{'²' if k == 2 else ''} ∝ width^{num(k * g)}" if g else "")
    if np.isfinite(lab[0]):
        how += f"; its group's lr during the step ∝ width^{num(lab[0])}"
    wide = keep[keep["width"] == keep["width"].max()]["v"].abs().median()
    first = np.nan  # Adam's step over its lr at the first update: below 1 only where ε is not small against √v̂
    if family in ADAM and "lr" in keep:
        one = keep[keep["step"] == keep["step"].min()]
        first = fit_points(one["width"], one["v"].abs() / one["lr"].abs(), one["step"])[0]
    return [_row({**base, "first": first}, "lr", float(wide), lab[0], fit, _expected(family, base["class"], "lr", a),
                 rules.tol, how, "not judged" if unmeasured else None, gain=k * g)]


def _declared_rows(base: dict, by_width: Mapping[int, Mapping[str, Any]], up: pd.DataFrame | None, a: tuple,
                   family: str, rules: Rules) -> list[dict]:
    """Weight decay (the per-step shrink lr·λ for decoupled decay, λ for coupled) and Adam's ε, as the optimizer
    held them: notes, never causes."""
    rows = []
    widths = sorted(by_width)
    if up is not None and "wd" in up and (up["wd"].fillna(0) > 0).any():
        u = up.reset_index()
        decoupled = family in ("adamw", "muon")
        v = (u["wd"] * u["lr"]) if decoupled else u["wd"]
        fit = fit_points(u["width"], v, u["step"], exact=True)
        how = "the per-step shrink lr·λ" if decoupled else "λ (coupled: added to the gradient)"
        rows.append(_row({**base, "wd_kind": "decoupled" if decoupled else "coupled"}, "wd",
                         float(v[u["width"] == u["width"].max()].median()), fit[0], fit,
                         _expected(family, base["class"], "wd", a), rules.tol, how))
    eps = [by_width[w].get("eps") for w in widths]
    if family in ADAM and all(e is not None and e > 0 for e in eps):
        fit = fit_points(np.array(widths), np.array(eps, dtype=float), exact=True)
        rows.append(_row(base, "adam_eps", float(eps[-1]), fit[0], fit, _expected(family, base["class"], "adam_eps",
                                                                                   a), rules.tol, "declared ε"))
    return rows


TABLE_COLUMNS = (["config_id", "parametrization", "parameter", "module", "order", "class", "family", "dims", "grows"]
                 + [f"{q}{s}" for q in QUANTITIES for s in ("", "_exponent", "_expected", "_status")]
                 + ["status", "violations"])
_RANK = {"fail": 3, "inconclusive": 2, "pass": 1, "zero": 1, "not judged": 0, "": 0}


def audit_table(long: pd.DataFrame) -> pd.DataFrame:
    """One row per (configuration, parameter): per quantity its value at the widest width, exponent, expectation and
    status; ``status`` the worst judged; ``violations`` in words (:data:`TABLE_COLUMNS`)."""
    keys = ["config_id", "parametrization", "parameter", "module", "order", "class", "family", "dims", "grows"]
    if long.empty:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    base = long.drop_duplicates(keys[:3])[keys].set_index(keys[:3])
    for q in QUANTITIES:
        part = long[long["quantity"] == q].set_index(keys[:3])
        base[q] = part["value"]
        base[f"{q}_exponent"] = part["exponent"]
        base[f"{q}_expected"] = part["expected"]
        base[f"{q}_status"] = part["status"]
    base = base.reset_index()
    ranked = long.assign(_r=long["status"].map(_RANK).fillna(0)).sort_values("_r", kind="stable")
    worst = ranked.groupby(keys[:3], sort=False)["status"].last()
    base["status"] = [worst.get(k, "") for k in zip(base["config_id"], base["parametrization"], base["parameter"])]
    bad = long[long["status"].isin(["fail", "inconclusive"])]
    text = {k: "; ".join(f"{WHAT[r.quantity]} ∝ width^{num(r.exponent)} (muP: {num(r.expected)}, {r.status})"
                         for r in g.itertuples()) for k, g in bad.groupby(keys[:3], sort=False)}
    base["violations"] = [text.get(k, "") for k in zip(base["config_id"], base["parametrization"], base["parameter"])]
    for c in [f"{q}_status" for q in QUANTITIES]:
        base[c] = base[c].fillna("")
    return base.sort_values(["config_id", "order"], kind="stable").reset_index(drop=True)[TABLE_COLUMNS]
