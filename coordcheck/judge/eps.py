"""Adam's ε judged: per parameter, the fraction of its coordinates where ε is not small against √v̂, against width.

Stage: judge (beside the parameter audit). Input: the tidy frame's ``eps`` rows (:mod:`coordcheck.record.eps`: per
Adam-family parameter and step, the fraction of sampled coordinates where ε ≥ 0.1·√v̂). Output: :func:`eps_table`
(per parameter: the fraction at the narrowest and widest width, its exponent in width, and the judgement),
:func:`eps_causes` (cause rows, kind ``epsilon``, where it grows with width and is material at the widest) and
:func:`eps_evidence` (evidence rows), in the schemas of ``Verdict.causes`` / ``Verdict.evidence``. The causes
(:mod:`coordcheck.judge.reconcile`) read the table too: ε taking over a module whose learning rate is right explains
its shrinking update. Never imports torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from coordcheck.core.frame import EPS_TENSOR, LOSS_MODULE
from coordcheck.core.text import num
from coordcheck.judge.causes import CAUSE_COLUMNS, EVIDENCE_COLUMNS
from coordcheck.judge.rules import Rules
from coordcheck.judge.slopes import fit_exponent

__all__ = ["EPS_MATERIAL", "EPS_COLUMNS", "EPS_FIX", "eps_table", "eps_causes", "eps_evidence"]

EPS_MATERIAL = 0.05  # ε fraction at the widest width above which growth with width is a cause

EPS_COLUMNS = ["config_id", "parametrization", "parameter", "layer_index", "role", "call_order", "step",
               "narrow", "wide", "min_width", "max_width", "exponent", "ci_low", "ci_high", "grows", "material",
               "violates"]


def eps_table(frame: pd.DataFrame, rules: Rules | None = None) -> pd.DataFrame:
    """Per (configuration, parameter): the ε fraction (:mod:`coordcheck.record.eps`) over the last ``Rules.persist``
    updated steps, at the narrowest and widest width (``narrow``, ``wide``: mean over those steps and seeds), its
    exponent in width (slope of log2 fraction against log2 width over every (width, seed, step) point where it is
    not zero, with a 95 % interval; the steps of one seed are not independent, so the interval is on the narrow
    side), and the judgement:
    ``grows`` (the interval lies above ``Rules.tol``, or it is zero at the narrowest width and not at the widest),
    ``material`` (at least :data:`EPS_MATERIAL` at the widest width), ``violates`` (both). ``step``: the last
    updated step.

    Only the last steps are judged because ε can dominate for a few steps for a reason that passes: behind a
    zero-initialised query the key's gradient is exactly zero at the first update and tiny (∝ the query, ∝ 1/width)
    for the next few, so on the built-in GPT (MuAdam, ε = 1e-8, widths 64–512) the keys' fraction at width 512 is
    79 % at step 3 and 0.4 % at step 10 (at width 64: 5 %, then 0); a fixed ε that is too large stays (the muP MLP
    with ε = 1e-5 at width 1024: 89–92 % of the hidden weights' coordinates at step 2, still 38–49 % at step 10,
    0–0.4 % at width 64; ``python experiments/eps.py --steps 10 --seeds 1``, ``--gpt``).
    """
    rules = rules or Rules()
    e = frame[(frame["tensor"] == EPS_TENSOR) & (frame["stat"] == "mean") & (frame["step"] >= 1)
              & (frame["module"] != LOSS_MODULE)]
    if e.empty:
        return pd.DataFrame(columns=EPS_COLUMNS)
    last = e.groupby("config_id")["step"].transform("max")
    e = e[e["step"] > last - rules.persist]  # the last persist updated steps: early transients are not judged
    keys = ["config_id", "parametrization", "module", "layer_index", "role", "call_order"]
    rows = []
    for key, g in e.groupby(keys, sort=False, observed=True):
        by_w = g.groupby(["width", "seed"])["value"].mean().groupby("width").mean().sort_index()
        narrow, wide = float(by_w.iloc[0]), float(by_w.iloc[-1])
        pos = g[g["value"] > 0]
        slope = c_lo = c_hi = np.nan
        if pos["width"].nunique() >= 2:
            slope, c_lo, c_hi = fit_exponent(pos["width"].to_numpy(dtype=float), pos["value"].to_numpy(dtype=float))
        grows = bool((np.isfinite(c_lo) and c_lo > rules.tol) or (narrow == 0 and wide > 0))
        material = wide >= EPS_MATERIAL
        rows.append((*key, int(g["step"].max()), narrow, wide, int(by_w.index[0]), int(by_w.index[-1]), slope,
                     c_lo, c_hi, grows, material, grows and material))
    return pd.DataFrame(rows, columns=EPS_COLUMNS[:2] + ["parameter"] + EPS_COLUMNS[3:])


EPS_FIX = "epsilon dominates the update at large width: scale eps by base_width/width or lower it"


def eps_causes(frame: pd.DataFrame, rules: Rules | None = None) -> pd.DataFrame:
    """Cause rows (:data:`CAUSE_COLUMNS`, kind ``epsilon``, measure ``eps``) for the parameters whose ε fraction
    grows with width and is material at the widest width (:func:`eps_table`), one per (configuration, role): "all 4
    hidden parameters: ε ≥ 0.1·√v̂ on 3 % of coordinates at width 64, 61 % at width 1024 (fraction ∝ width^+1.9
    [+1.6, +2.2]) — epsilon dominates the update at large width: scale eps by base_width/width or lower it"
    (Everett et al. 2024). ``exponent``: of the fraction, NaN when it is zero at the narrowest width."""
    t = eps_table(frame, rules)
    bad = t[t["violates"]]
    rows = []
    for (cid, role), g in bad.groupby(["config_id", "role"], sort=False):
        peers = t[(t["config_id"] == cid) & (t["role"] == role)]
        names = list(g["parameter"])
        what = (names[0] if len(names) == 1 else f"all {len(names)} {role} parameters" if len(names) == len(peers)
                else f"{len(names)} of {len(peers)} {role} parameters")
        w = g.loc[g["wide"].idxmax()]
        expo = (f" (fraction ∝ width^{num(w['exponent'])} [{num(w['ci_low'])}, {num(w['ci_high'])}])"
                if np.isfinite(w["ci_low"]) else "")
        line = (f"{what}: ε ≥ 0.1·√v̂ on {w['narrow']:.0%} of coordinates at width {w['min_width']}, {w['wide']:.0%} "
                f"at width {w['max_width']}{expo} — {EPS_FIX}")
        modules = list(dict.fromkeys(n.rpartition(".")[0] or "(root)" for n in names))
        rows.append([cid, w["parametrization"], int(g["call_order"].min()), "epsilon", what, modules, "eps",
                     int(w["step"]), float(w["exponent"]), float(w["ci_low"]), float(w["ci_high"]),
                     f"fraction flat in width and below {EPS_MATERIAL:.0%}",
                     "scale eps by base_width/width or lower it", line, "grows"])
    df = pd.DataFrame(rows, columns=CAUSE_COLUMNS)
    if len(df):
        df["order"] = df.groupby("config_id")["order"].rank(method="first").astype("int64") - 1
    return df


def eps_evidence(frame: pd.DataFrame, rules: Rules | None = None) -> pd.DataFrame:
    """The ε fraction's exponent per parameter (:func:`eps_table`) in the schema of ``Verdict.evidence``
    (:data:`EVIDENCE_COLUMNS`, ``measure`` ``eps``): allowed up to ``Rules.tol`` (a fraction that does not grow with
    width); ``violates`` as judged (growing and material); ``order``: the owning module's call order."""
    rules = rules or Rules()
    t = eps_table(frame, rules)
    t = t[np.isfinite(t["exponent"].astype(float))]
    return pd.DataFrame({
        "config_id": t["config_id"], "parametrization": t["parametrization"], "name": t["parameter"],
        "measure": "eps", "exponent": t["exponent"], "ci_low": t["ci_low"], "ci_high": t["ci_high"],
        "expected_low": -np.inf, "expected_high": rules.tol, "violates": t["violates"].astype(bool),
        "order": t["call_order"], "step": t["step"], "role": t["role"],
        "status": np.where(t["violates"], "fail", "pass"),
    }, columns=EVIDENCE_COLUMNS).reset_index(drop=True)
