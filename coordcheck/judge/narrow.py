"""Narrow-width effects: series that leave the band only because of the narrowest width.

Stage: judge (a pass of the verdict over its judged series). Input: the tidy frame and the judged series
(``coordcheck.judge.verdict``: slopes plus ``band_low``, ``band_high``, ``status``, ``direction``, ``diagnosis``).
Output: the same series with a ``narrow`` column (bool) and, where it is true, a diagnosis that says so and names
the width to drop or the wider one to add; and the one-line reason of a configuration whose every undecided
series is such an effect. Never imports torch.

A series outside the band (``fail`` or ``inconclusive``, growing or shrinking) is a narrow-width effect when both
hold:

1. **Without the narrowest width it is inside.** The same fit (:func:`coordcheck.judge.slopes.fit_slopes`, every
   remaining (width, seed) point) over the widths above the narrowest has its slope inside the series' band.
2. **The deviation shrinks as width grows.** The slope between each pair of adjacent widths (of the per-width
   mean over seeds of ``log2|value|``): the narrowest pair's is outside the band, every later one outside the
   band is smaller in magnitude than the one before it (inside the band a pair is flat, and its size no longer
   matters), and the widest pair's is inside.

The series keeps its status: a narrow-width effect is not clean evidence of muP, and it must not pass silently.
Its advice is to drop the narrowest width — when the remaining widths are still at least ``min_widths`` —
or to add the next wider one (the widest times the ratio of the two widest). Measured case (issue 17): a
correct Granite at widths 128-1024 whose layer-0 MLP down-projection std (0.148, 0.089, 0.063, 0.059 at step 2)
shrinks like width^-0.45 over all four widths, like width^-0.30 without 128 (inside [-0.35, +0.2]), with
neighbouring slopes -0.73, -0.50, -0.09.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from coordcheck.judge.slopes import CONFIG_COLUMNS, SERIES_COLUMNS, fit_slopes

__all__ = ["mark_narrow", "narrow_reason", "neighbour_slopes", "NARROW_DIAGNOSIS"]

KEYS = CONFIG_COLUMNS + SERIES_COLUMNS
NARROW_DIAGNOSIS = ("narrow-width effect: outside the band only because of width {narrow} (without it: slope "
                    "{slope:+.2f} [{lo:+.2f}, {hi:+.2f}]; the slope between neighbouring widths goes {gaps}, "
                    "{settles}): {advice}")
SETTLES = "inside the band from width {width} on"  # every pair from there on is inside
DROP_OR_ADD = "drop width {narrow} or add width {wider}"
ADD_ONLY = ("add width {wider} (without width {narrow} only {left} width(s) remain, fewer than the {need} a verdict "
            "needs)")
NARROW_REASON = ("{n} module(s) could not be decided only because of the narrowest width (e.g. {module} {tensor} "
                 "step {step}: {diagnosis})")


def neighbour_slopes(frame: pd.DataFrame, keys: list[str] = KEYS) -> pd.DataFrame:
    """The slope between each pair of adjacent widths of each series in ``frame``.

    Per (``keys``, width): the mean over seeds of ``log2|value|`` (finite, non-zero values only); per series,
    ordered by width, ``gap = d mean / d log2(width)`` between neighbours. Columns: ``keys``, ``width`` (the
    narrower of the pair), ``wider``, ``gap``.
    """
    v = frame["value"].to_numpy(dtype=float)
    good = np.isfinite(v) & (v != 0)
    df = frame.loc[good, keys + ["width"]].assign(y=np.log2(np.abs(v[good])))
    means = df.groupby(keys + ["width"], sort=True, dropna=False, observed=True)["y"].mean().reset_index()
    g = means.groupby(keys, sort=False, dropna=False, observed=True)
    x = np.log2(means["width"].to_numpy(dtype=float))
    means["wider"] = g["width"].shift(-1)
    means["gap"] = (g["y"].shift(-1) - means["y"]) / (np.log2(means["wider"].to_numpy(dtype=float)) - x)
    out = means.dropna(subset=["wider"]).drop(columns="y")
    return out.astype({"wider": "int64"}).reset_index(drop=True)


def _shrinks(gaps: np.ndarray, low: float, high: float) -> bool:
    """Condition 2: the narrowest pair outside the band, every later pair outside it smaller than the one before,
    the widest pair inside."""
    outside = (gaps < low) | (gaps > high)
    if len(gaps) < 2 or not outside[0] or outside[-1]:
        return False
    return all(not outside[i] or abs(gaps[i]) < abs(gaps[i - 1]) for i in range(1, len(gaps)))


def mark_narrow(frame: pd.DataFrame, series: pd.DataFrame, min_widths: int) -> pd.DataFrame:
    """``series`` with a ``narrow`` column, and the narrow-width diagnosis on the series where it is true.

    Candidates: ``fail`` / ``inconclusive`` series outside their band (``direction`` grows or shrinks) fitted
    over at least three widths. Statuses are unchanged. ``min_widths``: the verdict's (``Rules.min_widths``);
    fewer widths left once the narrowest is dropped means the advice is only to add a wider width.
    """
    series = series.assign(narrow=False)
    cand = series[series["status"].isin(["fail", "inconclusive"]) & series["direction"].isin(["grows", "shrinks"])
                  & (series["n_widths"] >= 3)]
    if cand.empty:
        return series
    keyed = cand[KEYS + ["min_width"]].reset_index(names="_row")
    rows = frame.merge(keyed, on=KEYS, how="inner")
    rest = fit_slopes(rows[rows["width"] > rows["min_width"]].drop(columns=["_row", "min_width"]))
    rest = keyed.merge(rest[KEYS + ["slope", "ci_low", "ci_high", "n_widths"]], on=KEYS, how="left")
    rest = rest.set_index("_row")
    gaps = {i: g.sort_values("width") for i, g in
            neighbour_slopes(rows.drop(columns="min_width"), KEYS + ["_row"]).groupby("_row", sort=False)}
    diagnosis = series["diagnosis"].copy()
    for i, r in cand.iterrows():
        low, high = float(r["band_low"]), float(r["band_high"])
        left = rest.loc[i]
        if i not in gaps or not (np.isfinite(left["slope"]) and low <= left["slope"] <= high):
            continue  # condition 1: still outside without the narrowest width
        g, pairs = gaps[i]["gap"].to_numpy(dtype=float), gaps[i]["width"].to_numpy()
        if not _shrinks(g, low, high):
            continue  # condition 2
        ws = np.append(pairs, gaps[i]["wider"].iloc[-1])  # the series' widths, narrow to wide
        narrow, wider = int(ws[0]), int(round(ws[-1] * ws[-1] / ws[-2]))
        n_left = int(left["n_widths"])
        advice = (DROP_OR_ADD.format(narrow=narrow, wider=wider) if n_left >= min_widths
                  else ADD_ONLY.format(narrow=narrow, wider=wider, left=n_left, need=min_widths))
        inside = (g >= low) & (g <= high)  # the first pair outside, the last inside (condition 2)
        tail = len(g) - int(np.argmin(inside[::-1]))  # the first pair of the run of inside pairs at the wide end
        diagnosis[i] = NARROW_DIAGNOSIS.format(narrow=narrow, slope=left["slope"], lo=left["ci_low"],
                                               hi=left["ci_high"], gaps=" → ".join(f"{x:+.2f}" for x in g),
                                               settles=SETTLES.format(width=int(pairs[tail])), advice=advice)
        series.loc[i, "narrow"] = True
    series["diagnosis"] = diagnosis
    return series


def narrow_reason(undecided: pd.DataFrame) -> str:
    """A configuration's reason when every one of its ``undecided`` series is a narrow-width effect, else ``""``."""
    if undecided.empty or "narrow" not in undecided or not undecided["narrow"].all():
        return ""
    first = undecided.iloc[0]
    return NARROW_REASON.format(n=undecided["module"].nunique(), module=first["module"], tensor=first["tensor"],
                                step=first["step"], diagnosis=first["diagnosis"])
