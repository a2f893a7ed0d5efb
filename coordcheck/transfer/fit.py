"""Does the learning rate transfer? The optimum per width, its shift per width doubling, and the rules of the verdict.

Stage: analysis (the μTransfer twin of ``coordcheck.judge.slopes``; never imports torch). Input: the tidy loss frame
(``coordcheck.transfer.frame``). Output: the curves, an optima table and a shift table (numbers 1-4 and 6 below),
which :func:`~coordcheck.transfer.verdict.judge_transfer` in :mod:`coordcheck.transfer.verdict` (the twin of
``coordcheck.judge.verdict``, with :class:`~coordcheck.transfer.verdict.TransferRules`) turns into a
:class:`~coordcheck.transfer.verdict.TransferVerdict` (number 5); the curve families of each axis are in
:mod:`coordcheck.transfer.axes`. The names of both are re-exported here.

The numbers, in order:

1. **Curve.** Per (configuration, parametrization, width): the held-out loss against log2(lr),
   the mean over seeds. A learning rate at which any seed diverged has no value (NaN).
2. **Optimum.** The vertex of the least-squares parabola in log2(lr) over the lowest point and
   up to two finite neighbours on each side (plain argmins are noisy: curves are flat near their
   minimum); with exactly three points, the parabola through them. Its standard error: from the
   spread of the seeds' own optima when two or more seeds have one, else from the same fit (its
   residuals, through the delta method: no error with three points), widened by Student's t for
   its few degrees of freedom (seeds - 1, or fitted points - 3). A vertex outside the fitted
   points (a flat or irregular curve) is no optimum.
3. **No optimum** (inconclusive): fewer than ``min_points`` finite points; the lowest point on
   the grid's edge (extend the grid that way); the lowest point next to a diverged learning rate
   (the optimum is at the edge of stability: refine the grid there); a flat or irregular curve.
4. **Shift.** The least-squares slope of the optimum log2(lr) against log2(width): octaves the
   optimum moves per width doubling, with a ``level`` interval propagated from the optima's
   (unweighted, so one optimum with a lucky tight fit cannot decide the slope alone).
   muP's optimum stays put (shift 0); a learning rate that is not scaled with width moves like
   width^-1 (shift -1, standard parametrization with Adam); one scaled twice like width^+1.
5. **Verdict** per parametrization: ``transfers`` when the shift's interval lies within
   ±``tol``; ``does not transfer`` when it lies outside; ``inconclusive`` when it straddles
   ±``tol`` (add seeds or steps), when an optimum is missing (rule 3) or when fewer than
   ``min_widths`` widths have one; ``does not transfer``, whatever the shift, when the widths built
   the same model or models that do not grow (``judge_transfer(..., facts=...)``,
   :func:`coordcheck.record.shapes.width_problem`). The sweep's verdict is that of the parametrizations under
   test; standard parametrization (``sp``), when swept beside them, is the control and is
   expected not to transfer.
6. **Wider is not worse.** The held-out loss of every width at the narrowest width's optimum
   (interpolated in log2(lr)): under muP it should not rise with width. Reported, not judged.

Across depth (``axis="depth"`` of :func:`fit_optima`, :func:`fit_shifts`, :func:`wider_not_worse`,
:func:`judge_transfer`): the same numbers over the depths of one family (``family_id``) at one width, the shift per
depth doubling, causes worded for depth, and one rule more: **deeper is not worse** — the best held-out loss
regressed on log2(depth), per seed; a slope whose interval lies above 0 does not transfer across depth, whatever
the shift (measured, docs/transfer.md: at 150 steps the optima of a model without branch multipliers stay as flat
as CompleteP's, while its best loss rises +0.12 per depth doubling).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from coordcheck.core.errors import CoordCheckError
from coordcheck.transfer.axes import KEYS, _select, axis_keys, with_depth
from coordcheck.transfer.axes import AXES, AXIS_KEYS, axes_of, swept  # noqa: F401  (re-exported)
from coordcheck.transfer.verdict import TransferRules
from coordcheck.transfer.verdict import DOES_NOT, INCONCLUSIVE, STATUSES, TRANSFERS  # noqa: F401  (re-exported)
from coordcheck.transfer.verdict import CONTROL, PAR_ORDER, TransferVerdict  # noqa: F401  (re-exported)
from coordcheck.transfer.verdict import across, judge_transfer  # noqa: F401  (re-exported)
from coordcheck.transfer.verdict import _deeper_worse, _depth_causes, _judge_one  # noqa: F401  (re-exported)
from coordcheck.transfer.verdict import _judge_shift, _octaves, _why_no_optimum  # noqa: F401  (re-exported)

__all__ = ["TransferRules", "TransferVerdict", "curves", "fit_optima", "fit_shifts", "judge_transfer",
           "wider_not_worse", "parabola_vertex", "fitted_parabola", "TRANSFERS", "DOES_NOT", "INCONCLUSIVE", "STATUSES",
           "CONTROL"]


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile (no scipy): bisection on the CDF, integrated with Simpson's rule."""
    if df < 1:
        return math.nan
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(x: float) -> float:
        t = np.linspace(0.0, x, 20001)
        f = c * (1 + t * t / df) ** (-(df + 1) / 2)
        return 0.5 + float((t[1] - t[0]) / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum()))

    lo, hi = 0.0, 1e3
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def curves(frame: pd.DataFrame) -> pd.DataFrame:
    """Held-out loss per (config_id, parametrization, width, lr), with its ``family_id`` and ``depth``: mean over
    seeds, NaN if any seed diverged (one table for both axes: a config_id is one family at one depth)."""
    held = with_depth(frame)[lambda d: d["split"] == "heldout"].copy()
    if held.empty:
        raise CoordCheckError("the frame has no held-out losses: is it a transfer sweep's frame?")
    held["log2_lr"] = np.log2(held["lr"])
    grouped = held.groupby([*KEYS, "family_id", "width", "depth", "experts", "lr", "log2_lr"], sort=True)
    out = grouped.agg(loss=("loss", lambda s: s.mean() if s.notna().all() else np.nan),
                      n_seeds=("seed", "nunique"),
                      diverged=("status", lambda s: int((s != "ok").sum()))).reset_index()
    return out


def parabola_vertex(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(x, y) of the vertex of the least-squares parabola (through the points when there are three); NaN when it
    opens downward."""
    coef = np.polyfit(x, y, 2)
    if not coef[0] > 0:
        return math.nan, math.nan
    xv = float(-coef[1] / (2 * coef[0]))
    return xv, float(np.polyval(coef, xv))


def fitted_parabola(x: np.ndarray, y: np.ndarray, low: float, high: float,
                    n: int = 41) -> tuple[np.ndarray, np.ndarray]:
    """The parabola an optimum is the vertex of, ``n`` points of it over [``low``, ``high``] (its row's ``fit_low`` and
    ``fit_high``: the points it was fitted to): the least-squares parabola of the curve's finite points (``x`` log2 lr,
    ``y`` loss) in that range, as :func:`fit_optima` fits it. Empty when the range is not finite (no optimum)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return np.empty(0), np.empty(0)
    inside = np.isfinite(y) & (x >= low) & (x <= high)
    coef = np.polyfit(x[inside], y[inside], 2)
    xs = np.linspace(low, high, n)
    return xs, np.polyval(coef, xs)


def _fit_se(x: np.ndarray, y: np.ndarray) -> float:
    """Standard error of the vertex of a least-squares parabola (delta method); NaN without residual freedom
    (its degrees of freedom are ``len(x) - 3``)."""
    if len(x) < 4:
        return math.nan
    coef, cov = np.polyfit(x, y, 2, cov="unscaled")
    a, b, _ = coef
    if not a > 0:
        return math.inf
    resid = y - np.polyval(coef, x)
    sigma2 = float(resid @ resid) / (len(x) - 3)
    grad = np.array([b / (2 * a * a), -1 / (2 * a), 0.0])  # d(-b/2a)/d(a, b, c)
    return float(math.sqrt(max(sigma2 * grad @ cov @ grad, 0.0)))


def _one_optimum(x: np.ndarray, y: np.ndarray, grid: np.ndarray, rules: TransferRules) -> dict:
    """Optimum of one curve (``x`` sorted log2 lr, ``y`` loss, NaN = diverged) on the full ``grid``."""
    finite = np.isfinite(y)
    out = {"optimum": math.nan, "optimum_loss": math.nan, "fit_se": math.nan, "fit_df": 0, "argmin": math.nan,
           "fit_low": math.nan, "fit_high": math.nan, "n_finite": int(finite.sum()), "edge": ""}
    if finite.sum() < rules.min_points:
        out["edge"] = "few"
        return out
    i = int(np.nanargmin(np.where(finite, y, np.inf)))
    out["argmin"] = float(x[i])
    if x[i] == grid.min():
        out["edge"] = "low"
        return out
    if x[i] == grid.max():
        out["edge"] = "high"
        return out
    if i == 0 or i == len(x) - 1 or not (finite[i - 1] and finite[i + 1]):
        out["edge"] = "unstable"  # a neighbour diverged (or is missing)
        return out
    lo, hi = i, i
    while lo > 0 and i - lo < 2 and finite[lo - 1]:
        lo -= 1
    while hi < len(x) - 1 and hi - i < 2 and finite[hi + 1]:
        hi += 1
    # one fit gives the optimum and its standard error (the same points): the least-squares parabola
    # over the window; with exactly 3 points it is the parabola through them, without an error of its own
    xs, ys = x[lo : hi + 1], y[lo : hi + 1]
    vertex, vertex_loss = parabola_vertex(xs, ys)
    if not (math.isfinite(vertex) and xs[0] <= vertex <= xs[-1]):
        out["edge"] = "flat"  # opens downward, or its vertex falls outside the points it was fitted to
        return out
    out["optimum"], out["optimum_loss"] = vertex, vertex_loss
    out["fit_low"], out["fit_high"] = float(xs[0]), float(xs[-1])
    out["fit_se"], out["fit_df"] = _fit_se(xs, ys), len(xs) - 3
    return out


def fit_optima(frame: pd.DataFrame, rules: TransferRules | None = None, axis: str = "width") -> pd.DataFrame:
    """One row per curve: the optimum log2 lr, its SE and interval, and why not. ``axis="width"``: a row per
    (config_id, parametrization, width); ``"depth"``: per (family_id, parametrization, width, depth), with the
    ``config_id`` of that depth and each seed's best held-out loss on the grid (``seed_best_losses``)."""
    rules = rules or TransferRules()
    keys = axis_keys(axis)
    frame = with_depth(frame)
    held = frame[frame["split"] == "heldout"].assign(log2_lr=lambda d: np.log2(d["lr"]))
    curve = curves(frame)
    rows = []
    for group, part in curve.groupby(keys, sort=True):
        grid = np.sort(_select(held, keys, group)["log2_lr"].unique())
        for value, c in part.groupby(axis, sort=True):
            c = c.sort_values("log2_lr")
            best = _one_optimum(c["log2_lr"].to_numpy(), c["loss"].to_numpy(), grid, rules)
            seeds = _select(held, [*keys, axis], [*group, value])
            per_seed, seed_best = [], []
            for _, s in seeds.groupby("seed"):
                s = s.sort_values("log2_lr")
                per_seed.append(_one_optimum(s["log2_lr"].to_numpy(), s["loss"].to_numpy(), grid, rules)["optimum"])
                seed_best.append(float(s["loss"].min()) if s["loss"].notna().any() else math.nan)
            per_seed = np.array([o for o in per_seed if math.isfinite(o)])
            if len(per_seed) >= 2:
                se, df, source = float(per_seed.std(ddof=1) / math.sqrt(len(per_seed))), len(per_seed) - 1, "seeds"
            else:
                se, df, source = best["fit_se"], best["fit_df"], "fit"
            # few degrees of freedom: Student's t, not the normal (the interval is opt +- t * se)
            half = t_quantile(0.5 + rules.level / 2, df) * se if df >= 1 else math.nan
            opt = best["optimum"]
            finite_lr = c.loc[np.isfinite(c["loss"]), "log2_lr"]
            where = dict(zip(keys, group)) | {axis: int(value)}
            if axis != "width":
                where["config_id"] = str(c["config_id"].iloc[0])
            rows.append({
                **where, "optimum": opt,
                "optimum_loss": best["optimum_loss"],
                "se": half / rules.z if math.isfinite(opt) else math.nan, "se_source": source, "df": df,
                "ci_low": opt - half, "ci_high": opt + half,
                "fit_low": best["fit_low"], "fit_high": best["fit_high"],
                "best_lr": 2.0 ** best["argmin"] if math.isfinite(best["argmin"]) else math.nan,
                "best_loss": float(np.nanmin(c["loss"])) if finite_lr.size else math.nan,
                "n_lrs": len(c), "n_finite": best["n_finite"], "n_seeds": int(c["n_seeds"].max()),
                "n_seed_optima": len(per_seed), "edge": best["edge"],
                "grid_low": float(grid.min()), "grid_high": float(grid.max()),
                "max_stable": float(finite_lr.max()) if finite_lr.size else math.nan,
                **({"seed_best_losses": seed_best} if axis == "depth" else {}),
            })
    return pd.DataFrame(rows)


def _slope(x: np.ndarray, y: np.ndarray, se: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of ``y`` on ``x`` and its SE propagated from each point's ``se`` (unweighted)."""
    coef = (x - x.mean()) / np.sum((x - x.mean()) ** 2)  # least squares: slope = coef @ y
    used = coef != 0  # a point at the centre has no say in the slope, nor in its error
    return float(coef @ y), float(math.sqrt(np.sum(coef[used] ** 2 * se[used] ** 2)))  # NaN: a point without error


def fit_shifts(optima: pd.DataFrame, rules: TransferRules | None = None, axis: str = "width") -> pd.DataFrame:
    """One row per curve family of ``axis`` (``axis_keys``: (config_id, parametrization) for width; (family_id,
    parametrization, width) for depth): the optimum's shift per doubling of ``axis`` and its interval (``n_widths``
    or ``n_depths``: the points; ``n_optima``: those with an optimum). Across depth also ``loss_slope``: the change of
    the best held-out loss per depth doubling (each depth's lowest grid point; interval from the seeds' own slopes
    when two or more seeds have one at every depth): deeper should not be worse."""
    rules = rules or TransferRules()
    keys = axis_keys(axis)
    rows = []
    for group, o in optima.groupby(keys, sort=True):
        o = o.sort_values(axis)
        ok = o[np.isfinite(o["optimum"])]
        row = {**dict(zip(keys, group)), f"n_{axis}s": int(len(o)), "n_optima": int(len(ok)),
               "shift": math.nan, "se": math.nan, "ci_low": math.nan, "ci_high": math.nan}
        if len(ok) >= 2:
            slope, slope_se = _slope(np.log2(ok[axis].to_numpy(float)), ok["optimum"].to_numpy(float),
                                     ok["se"].to_numpy(float))
            row.update(shift=slope, se=slope_se, ci_low=slope - rules.z * slope_se, ci_high=slope + rules.z * slope_se)
        if axis == "depth":
            row.update(_loss_slope(o, rules))
        rows.append(row)
    return pd.DataFrame(rows)


def _loss_slope(o: pd.DataFrame, rules: TransferRules) -> dict[str, float]:
    """The best held-out loss against log2(depth): its slope per doubling, with an interval over seeds."""
    out = {"loss_slope": math.nan, "loss_slope_low": math.nan, "loss_slope_high": math.nan}
    best = o[np.isfinite(o["best_loss"])]
    if len(best) < 2:
        return out
    x = np.log2(best["depth"].to_numpy(float))
    out["loss_slope"] = _slope(x, best["best_loss"].to_numpy(float), np.zeros(len(x)))[0]
    per_seed = np.array([list(s) for s in best["seed_best_losses"]], dtype=float) if len(
        {len(s) for s in best["seed_best_losses"]}) == 1 else np.empty((0, 0))
    if per_seed.ndim == 2 and per_seed.shape[1] >= 2 and np.isfinite(per_seed).all():
        slopes = np.array([_slope(x, per_seed[:, k], np.zeros(len(x)))[0] for k in range(per_seed.shape[1])])
        half = t_quantile(0.5 + rules.level / 2, len(slopes) - 1) * slopes.std(ddof=1) / math.sqrt(len(slopes))
        out.update(loss_slope_low=out["loss_slope"] - float(half), loss_slope_high=out["loss_slope"] + float(half))
    return out


def wider_not_worse(frame: pd.DataFrame, optima: pd.DataFrame, axis: str = "width") -> pd.DataFrame:
    """Per curve (``axis_keys`` and ``axis``): held-out loss at the optimum learning rate of the smallest ``axis``
    value that has one (the narrowest width; across depth the shallowest depth: deeper is not worse)."""
    keys = axis_keys(axis)
    curve = curves(frame)
    rows = []
    for group, o in optima.groupby(keys, sort=True):
        o = o.sort_values(axis)
        ref = o[np.isfinite(o["optimum"])]
        if ref.empty:
            continue
        x0 = float(ref["optimum"].iloc[0])
        for value, c in _select(curve, keys, group).groupby(axis):
            c = c[np.isfinite(c["loss"])].sort_values("log2_lr")
            inside = len(c) >= 2 and c["log2_lr"].min() <= x0 <= c["log2_lr"].max()
            loss = float(np.interp(x0, c["log2_lr"], c["loss"])) if inside else math.nan
            rows.append({**dict(zip(keys, group)), axis: int(value),
                         f"reference_{axis}": int(ref[axis].iloc[0]), "log2_lr": x0, "loss": loss})
    return pd.DataFrame(rows)
