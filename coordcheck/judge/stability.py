"""Stability and persistence: which steps are judged, and which violations are one noisy step.

Stage: judge (a pass of the verdict and of the depth verdict over their judged series). Input: a tidy frame's loss
rows (:func:`find_instability`), judged series and their stability window (:func:`mark_transients`). Output: the
first unstable step per (configuration, width, seed); the series with one-step violations marked ``transient``.
Never imports torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from coordcheck.judge.rules import Rules
from coordcheck.judge.slopes import CONFIG_COLUMNS

__all__ = ["find_instability", "mark_transients"]


def find_instability(frame: pd.DataFrame, rise: float = Rules.rise, rise_floor: float = Rules.rise_floor,
                     persist: int = 1) -> pd.DataFrame:
    """Per (configuration, width, seed): the first unstable step from the loss, if any.

    A step is too high when its loss exceeds the running minimum by more than ``rise`` of it and
    by more than ``rise_floor`` of the step-0 loss; training turns unstable at the first step
    that starts ``persist`` consecutive too-high steps (a one-step spike that recovers is not
    instability; a rise at the last steps, which cannot be confirmed, counts), or at the first
    non-finite loss. Columns: configuration columns, ``width, seed, unstable_step`` (NaN when
    stable), ``reason`` (``non-finite loss`` / ``loss rose from A to B``), ``last_step``.
    """
    loss = frame[frame["tensor"] == "loss"].sort_values("step")
    rows = []
    for key, g in loss.groupby(CONFIG_COLUMNS + ["width", "seed"], sort=True, dropna=False):
        v = g["value"].to_numpy(dtype=float)
        steps = g["step"].to_numpy()
        running = np.minimum.accumulate(np.where(np.isfinite(v), v, np.inf))
        before = np.concatenate([[np.inf], running[:-1]])  # the running minimum before each step
        high = (np.arange(len(v)) > 0) & (v > (1 + rise) * before) & (v - before > rise_floor * v[0])
        first, reason = np.nan, ""
        for i, (s, x) in enumerate(zip(steps, v)):
            if not np.isfinite(x):
                first, reason = s, "non-finite loss"
                break
            if high[i] and (high[i : i + persist].all() or i + persist > len(v)):
                first, reason = s, f"loss rose from {before[i]:.3g} to {x:.3g}"
                break
        rows.append((*key, first, reason, steps.max() if len(steps) else -1))
    return pd.DataFrame(rows, columns=CONFIG_COLUMNS + ["width", "seed", "unstable_step", "reason", "last_step"])


def mark_transients(series: pd.DataFrame, in_window: pd.Series, window_end: dict[str, int], *,
                     persist: int, gross: float) -> pd.DataFrame:
    """Rule 4: after updates, a violation must persist over ``persist`` consecutive judged steps.

    Per (configuration, module, tensor), the judged updated steps whose slope is outside the
    band in the same direction (``fail``, or ``inconclusive`` with the estimate outside) form
    runs of consecutive steps. A shorter run is one noisy step, not a bug: its series become
    ``transient`` (reported, not counted) — unless the run holds a *gross* violation (its whole
    95% interval more than ``gross`` beyond the band: the standard-parametrization readout jumps
    like width^+1.0 [+0.88, +1.14] right after the first update, then oscillates; one-step blips
    of correct models reached +0.44 [+0.24, +0.64] to +0.83 [+0.31, +1.35]), or is significant
    (a ``fail``) at the last judged step, where the next step could not confirm or clear it
    (then ``inconclusive``).
    Step 0 is judged on its own.
    """
    if persist <= 1:
        return series
    gross_rows = (series["status"] == "fail") & ((series["ci_low"] > series["band_high"] + gross)
                                                 | (series["ci_high"] < series["band_low"] - gross))
    outside = in_window & (series["step"] > 0) & series["direction"].isin(["grows", "shrinks"]) \
        & series["status"].isin(["fail", "inconclusive"])
    cand = series[outside].sort_values("step")
    transient, unconfirmed = [], []
    for (cid, *_), g in cand.groupby(["config_id", "module", "tensor", "stat"], sort=False):
        steps, dirs, idx = g["step"].to_numpy(), g["direction"].to_numpy(), g.index.to_numpy()
        run = [0]
        for i in range(1, len(g) + 1):
            if i < len(g) and steps[i] == steps[i - 1] + 1 and dirs[i] == dirs[i - 1]:
                run.append(i)
                continue
            if len(run) < persist and not gross_rows[idx[run]].any():
                significant = (g["status"].to_numpy()[run] == "fail").any()
                (unconfirmed if significant and steps[run[-1]] >= window_end[cid] else transient).extend(idx[run])
            run = [i]
    series = series.copy()
    for rows, status, text in (
        (transient, "transient", "outside the band at step {} only ({:+.2f}): a one-step transient, not a persistent "
                                 "violation"),
        (unconfirmed, "inconclusive", "outside the band at step {} ({:+.2f}), the last judged step, only: run more "
                                      "steps to tell a transient from a bug")):
        if rows:
            t = series.loc[rows]
            series.loc[rows, "diagnosis"] = [text.format(st, sl) + (f" — {d}" if status == "inconclusive" else "")
                                             for st, sl, d in zip(t["step"], t["slope"], t["diagnosis"])]
            series.loc[rows, "status"] = status
    return series
