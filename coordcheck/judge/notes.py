"""Notes: the deviations no failing series shows, each with its forecast — never causes.

Stage: judge (beside :mod:`coordcheck.judge.explain`, which calls it once the causes are known). Input: the measured
facts (:func:`coordcheck.judge.facts.measured_facts`), the indices of the violations that explain a failing series,
the ε shares (:func:`coordcheck.judge.eps.eps_table`). Output: rows in the schema of ``Verdict.causes``
(``Verdict.quiet``:
``kind`` the knob) and one note each: a measured init or update off muP's table that no series shows yet (its factor
at :data:`FORECAST_WIDTH`), weight decay and ε as the optimizer declared them (weight decay's equilibrium: Kosson
et al. 2025), an ε share that grows, a selective scan's parameters measured and not judged. Never imports torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from coordcheck.judge.facts import NO_RULE, WHAT, num
from coordcheck.judge.fixes import band, group_name, knob, readout_fix

__all__ = ["FORECAST_WIDTH", "forecast", "quiet", "no_rule"]

FORECAST_WIDTH = 4096


def forecast(r: pd.Series) -> str:
    """Where a deviation no series shows yet would be at :data:`FORECAST_WIDTH`: its factor against muP's scaling,
    from the narrowest width measured."""
    gap = float(r["exponent"]) - float(r["expected"])
    if not np.isfinite(gap) or not np.isfinite(float(r["min_width"])):
        return ""
    factor = (FORECAST_WIDTH / float(r["min_width"])) ** gap
    return (f"; at width {FORECAST_WIDTH} it would be {factor:.3g}× what muP's scaling gives from width "
            f"{int(r['min_width'])}")


def quiet(long: pd.DataFrame, used: set[int], eps: pd.DataFrame, tol: float) -> tuple[list[dict], list[str]]:
    """Deviations no failing series shows — a measured init or update off muP's table, weight decay and ε as the
    optimizer declared them, a growing ε share — as rows (:data:`CAUSE_COLUMNS`, ``kind`` the knob: ``init``,
    ``lr``, ``epsilon``, ``wd``, ``dynamics`` for an update that falls short of a right lr only after its first
    step) and one note each group, with its forecast: never causes."""
    rows, notes = [], []
    quiet = long[long["status"].eq("fail") & ~long.index.isin(list(used))]
    for (cid, q, cls, fam, d), g in quiet.groupby(["config_id", "quantity", "class", "family", "direction"],
                                                  sort=False):
        w = g.loc[(g["exponent"] - g["expected"]).abs().idxmax()]
        peers = long[(long["config_id"] == cid) & (long["quantity"] == q) & (long["class"] == cls)
                     & (long["family"] == fam)]
        what = group_name(list(g["parameter"]), str(cls), len(peers))
        kind = {"wd": "wd", "adam_eps": "epsilon", "init": "init"}.get(str(q)) or knob(w, tol)
        readout = q in ("init", "lr") and cls == "output-like" and w["role"] == "output"
        fix = readout_fix(long[long["config_id"] == cid], str(w["module"]), str(fam), tol) if readout else None
        fix = fix if fix is not None and fix[2] else None
        if fix is not None:
            kind = fix[0]  # the readout's whole fix names its knob (its multiplier, as often as not)
        if q == "wd":
            steps = f"; reached after ~1/(lr·λ) ≈ {1 / float(w['value']):.3g} steps at width {int(w['max_width'])}" \
                if w["wd_kind"] == "decoupled" and float(w["value"]) > 0 else ""
            line = (f"{what}: weight decay ({w['how']}) ∝ width^{num(w['exponent'])} where muP's convention keeps "
                    f"width^{num(w['expected'])} ({w['reason']}) — not a cause: ten steps cannot show it; over a long "
                    "run it sets each matrix's equilibrium norm and relative update ∝ √(lr·λ) (Kosson et al. 2025, "
                    f"arXiv 2510.19093){steps}, where the learning rate found at one width stops transferring")
        elif q == "adam_eps":
            line = f"{what}: Adam's ε ∝ width^{num(w['exponent'])} (muP: constant or smaller) — not a cause: no " \
                   "judged " \
                   "series fails with it"
        elif kind == "dynamics":
            line = (f"{what}: {WHAT[q]} ∝ width^{num(w['exponent'])} (muP: {band(w)}; {w['how']}) with its learning "
                    "rate as muP expects and its first step full: the later steps' dynamics, not a knob")
        else:
            line = (f"{what}: {WHAT[q]} ∝ width^{num(w['exponent'])} (muP: {band(w)}; {w['how']}) — not a cause: no "
                    f"judged series fails with it{forecast(w)}" + (f"; its fix would be: {fix[1]}" if fix else ""))
        notes.append(line)
        rows.append(dict(config_id=cid, parametrization=str(w["parametrization"]), order=len(rows), kind=kind,
                         what=what, modules=list(dict.fromkeys(g["module"])), measure=str(q), step=0,
                         exponent=float(w["exponent"]), ci_low=float(w["ci_low"]), ci_high=float(w["ci_high"]),
                         expected=band(w), fix="", line=line, direction=str(d)))
    if len(eps):
        grow = eps[eps["grows"].astype(bool) & (eps["wide"] > 0)]
        for cid, g in grow.groupby("config_id", sort=False):
            e = g.loc[g["wide"].idxmax()]
            k = float(e["exponent"]) if np.isfinite(float(e["exponent"])) else np.nan
            at = min(1.0, float(e["wide"]) * (FORECAST_WIDTH / float(e["max_width"])) ** k) if np.isfinite(k) \
                else np.nan
            more = f"; at width {FORECAST_WIDTH} it would be ~{at:.0%}" if np.isfinite(at) else ""
            line = (f"Adam's ε ≥ 0.1·√v̂ on {e['narrow']:.0%} of {e['parameter']}'s coordinates at width "
                    f"{int(e['min_width'])}, {e['wide']:.0%} at width {int(e['max_width'])}{more} — a forecast, not a "
                    "cause: no judged series fails with it")
            notes.append(line)
            mods = list(dict.fromkeys(n.rpartition(".")[0] or "(root)" for n in g["parameter"]))
            rows.append(dict(config_id=cid, parametrization=str(e["parametrization"]), order=len(rows),
                             kind="epsilon", what=f"{len(g)} parameters", modules=mods, measure="eps", step=0,
                             exponent=k, ci_low=float(e["ci_low"]), ci_high=float(e["ci_high"]),
                             expected="no growth", fix="", line=line, direction="grows"))
    return rows, notes


def no_rule(long: pd.DataFrame) -> list[str]:
    """One note per configuration for the parameters measured but with no established muP rule (a selective scan's
    vectors: :data:`coordcheck.judge.facts.NO_RULE`), with their measured exponents."""
    notes = []
    rows = long[(long["reason"] == NO_RULE) & long["quantity"].isin(["init", "lr"])]
    for _, g in rows.groupby("config_id", sort=False):
        per = g.pivot_table(index="parameter", columns="quantity", values="exponent", sort=False)
        said = [f"{name} (" + ", ".join(f"{q} ∝ width^{num(per.at[name, q])}" for q in ("init", "lr")
                                          if q in per.columns and np.isfinite(per.at[name, q])) + ")"
                for name in per.index]
        more = f" and {len(said) - 6} more" if len(said) > 6 else ""
        notes.append(f"not judged: no established muP rule for {', '.join(said[:6])}{more} — a selective scan's "
                     "parameters (Vankadara et al., NeurIPS 2024); measured, not judged")
    return notes
