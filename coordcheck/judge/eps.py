"""Adam's ε judged: per parameter, the fraction of its coordinates where ε is not small against √v̂, against width.

Stage: judge (beside the measured facts). Input: the tidy frame's ``eps`` rows (:mod:`coordcheck.record.eps`: per
Adam-family parameter and step, the fraction of sampled coordinates where ε ≥ 0.1·√v̂). Output: :func:`eps_table`
(per parameter: the fraction at the narrowest and widest width, its exponent in width, and whether it grows). The
causes (:mod:`coordcheck.judge.explain`) read it: a note with its forecast where the share grows, the numbers beside
an ε cause (an Adam-trained parameter whose measured update falls short of its learning rate). Never imports torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from coordcheck.core.frame import EPS_TENSOR, LOSS_MODULE
from coordcheck.judge.rules import Rules
from coordcheck.judge.slopes import fit_exponent

__all__ = ["EPS_MATERIAL", "EPS_COLUMNS", "eps_table"]

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
