"""The μTransfer figures (Tensor Programs V, figure 1): loss against learning rate, and optimum against width.

Across depth (``axis="depth"``) the same figures with a line per depth, and the optimum against depth beside the best
held-out loss against depth (deeper must not be worse).

Stage: figures (analysis side; never imports torch). Input: the curves and optima tables of
``coordcheck.transfer.fit``. Output: matplotlib figures, saved as PDF + PNG when a path is given.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D

from coordcheck.plot import (
    WIDTH_PALETTE,
    Size,
    facet_size,
    add_legend,
    font_pt,
    legend_line,
    log2_labels,
    figure_style,
    save_figure,
    seaborn_modules,
)
from coordcheck.transfer.fit import fitted_parabola
from coordcheck.transfer.verdict import PAR_ORDER, across

__all__ = ["plot_transfer", "plot_optima", "label_lr_axis"]

FIT_DASHES = (4, 2)  # the fitted parabola, over the points it was fitted to


def label_lr_axis(axes, log2_lrs: np.ndarray) -> None:
    """The x axes of ``axes`` (log2 lr, shared) ticked at the powers of two the grid spans (to half an octave beyond
    its ends) and labelled 2^-8: a grid of powers of two at its own points, 0.001, 0.002, ... beside 2^-10, 2^-9, ...
    Every power is labelled when the labels fit the panel's width, else every second (third, ...), the others
    ticked without a label."""
    lo, hi = math.ceil(np.min(log2_lrs) - 0.5), math.floor(np.max(log2_lrs) + 0.5)  # the nearest powers inside
    powers = np.arange(lo, hi + 1)
    ax = axes[0]
    renderer = ax.figure.canvas.get_renderer()
    font = FontProperties(size=font_pt("xtick.labelsize"))
    widest = max(renderer.get_text_width_height_descent(t, font, ismath=True)[0]
                 for t in log2_labels(2.0**powers, powers=True))
    octave = abs(ax.transData.transform((1, 0))[0] - ax.transData.transform((0, 0))[0])  # pixels per octave
    every = max(1, math.ceil((widest + font.get_size_in_points() / 72 * ax.figure.dpi) / octave))
    labelled = powers[powers % every == 0] if every > 1 else powers
    for a in axes:
        a.set_xticks(labelled.astype(float), log2_labels(2.0**labelled, powers=True))
        a.set_xticks(powers[~np.isin(powers, labelled)].astype(float), minor=True)
        a.grid(True, which="minor", axis="x", linewidth=0.5, alpha=0.5)


def _par_order(values) -> list[str]:
    present = sorted(set(values))
    return [p for p in PAR_ORDER if p in present] + [p for p in present if p not in PAR_ORDER]


def _panels(df: pd.DataFrame) -> pd.Series:
    """Across depth, a panel per (parametrization, family, width): the parametrization, and the family / width when
    several share it."""
    label = df["parametrization"].astype(str)
    if df["family_id"].nunique() > 1:
        label = label + " " + df["family_id"].astype(str).str[:6]
    if df["width"].nunique() > 1:
        label = label + " width " + df["width"].astype(str)
    return label


def plot_transfer(curves: pd.DataFrame, optima: pd.DataFrame, path: str | Path | None = None, *,
                  title: str | None = None, size: Size = "paper", axis: str = "width"):
    """Held-out loss against the learning rate (a log2 axis labelled in powers of two), a line through the measured
    points per width (light = narrow, dark = wide), a panel per parametrization on a shared y axis; each width's
    fitted parabola dashed over the points it was fitted to, with its vertex, the optimum, a star on it (the optimum
    is the fit's, not the lowest point's); diverged learning rates are crosses along the top. ``axis="depth"``: a
    line per depth (light = shallow, dark = deep), a panel per parametrization (and family and width, when
    several)."""
    if curves.empty:
        raise ValueError("no held-out losses to plot")
    if axis != "width":  # depth, or the number of experts: a panel per family and width
        curves = curves.assign(parametrization=_panels(curves))
        optima = optima.assign(parametrization=_panels(optima))
    elif curves.groupby("parametrization")["config_id"].nunique().max() > 1:
        raise ValueError("a parametrization holds several configurations: plot one at a time")
    sns, _ = seaborn_modules()
    cols = _par_order(curves["parametrization"])
    widths = np.sort(curves[axis].unique())
    palette = dict(zip(widths, sns.color_palette(WIDTH_PALETTE, len(widths))))
    facet_w, facet_h = facet_size(size, 1, len(cols), max_cols=2)
    finite = curves[np.isfinite(curves["loss"])]
    with figure_style(size):
        g = sns.FacetGrid(finite, col="parametrization", col_order=cols, sharey=True, height=facet_h,
                          aspect=facet_w / facet_h)
        g.map_dataframe(sns.lineplot, x="log2_lr", y="loss", hue=axis, hue_order=list(widths), palette=palette,
                        marker="o", markersize=4, linewidth=1.0, legend=False)
        for par, ax in zip(cols, g.axes.flat):
            o = optima[(optima["parametrization"] == par) & np.isfinite(optima["optimum"])]
            for row in o.itertuples():
                colour = palette[getattr(row, axis)]
                c = finite[(finite["parametrization"] == par) & (finite[axis] == getattr(row, axis))]
                xs, ys = fitted_parabola(c["log2_lr"].to_numpy(), c["loss"].to_numpy(), row.fit_low, row.fit_high)
                ax.plot(xs, ys, color=colour, linewidth=1.4, dashes=FIT_DASHES, zorder=4)
                ax.plot(row.optimum, row.optimum_loss, marker="*", markersize=11, color=colour,
                        markeredgecolor="black", markeredgewidth=0.6, linestyle="none", zorder=5)
            div = curves[(curves["parametrization"] == par) & ~np.isfinite(curves["loss"])]
            for row in div.itertuples():
                ax.plot(row.log2_lr, 0.97, marker="x", color=palette[getattr(row, axis)],
                        transform=ax.get_xaxis_transform(),
                        linestyle="none", clip_on=False)
        g.set_titles(col_template="{col_name}")
        g.set_axis_labels("learning rate", "held-out loss")
        label_lr_axis(list(g.axes.flat), curves["log2_lr"].to_numpy())
        handles = {str(w): legend_line(palette[w], marker="o") for w in widths}
        handles["fitted parabola"] = legend_line("0.5", dashes=FIT_DASHES, linewidth=1.4)
        handles["its vertex: optimum"] = Line2D([], [], color="0.5", marker="*", markersize=9,
                                                markeredgecolor="black", markeredgewidth=0.6, linestyle="none")
        if (~np.isfinite(curves["loss"])).any():
            handles["diverged"] = Line2D([], [], color="0.3", marker="x", markersize=6, markeredgewidth=1.5,
                                         linestyle="none")
        add_legend(g.figure, handles, axis)
        if title:
            g.figure.suptitle(title, fontsize="medium", y=1.02)
    save_figure(g.figure, path)
    return g.figure


def plot_optima(optima: pd.DataFrame, path: str | Path | None = None, *, shifts: pd.DataFrame | None = None,
                size: Size = "paper", axis: str = "width"):
    """The fitted optimum log2(lr) against width (log2 axis), a line per parametrization, with its interval.
    ``axis="depth"``: against depth, a line per parametrization (and family and width), and beside it the best
    held-out loss against depth."""
    sns, plt = seaborn_modules()
    if axis != "width":
        optima = optima.assign(parametrization=_panels(optima))
        if shifts is not None:
            shifts = shifts.assign(parametrization=_panels(shifts))
    ok = optima[np.isfinite(optima["optimum"])]
    if ok.empty:
        raise ValueError(f"no {axis} has a fitted optimum (see the report for why)")
    pars = _par_order(ok["parametrization"])
    colours = dict(zip(pars, sns.color_palette("colorblind", len(pars))))
    facet_w, facet_h = facet_size(size, 1, 1, max_cols=2)
    with figure_style(size):
        if axis == "depth":
            fig, (ax, ax_loss) = plt.subplots(1, 2, figsize=(2 * facet_w + 1.2, facet_h))
        else:
            fig, ax = plt.subplots(figsize=(facet_w + 1.2, facet_h))
        for par in pars:
            o = ok[ok["parametrization"] == par].sort_values(axis)
            label = par
            if shifts is not None:
                s = shifts[shifts["parametrization"] == par]
                if len(s) and math.isfinite(s["shift"].iloc[0]):
                    label = f"{par}: {s['shift'].iloc[0]:+.2f}/doubling ({across(s['status'].iloc[0], axis)})"
            err = np.vstack([o["optimum"] - o["ci_low"], o["ci_high"] - o["optimum"]])
            ax.errorbar(o[axis], o["optimum"], yerr=np.where(np.isfinite(err), err, 0), marker="o", capsize=3,
                        color=colours[par], label=label)
            if axis == "depth":
                b = optima[optima["parametrization"] == par].sort_values(axis)
                ax_loss.plot(b[axis], b["best_loss"], marker="o", color=colours[par], label=par)
        widths = np.sort(optima[axis].unique())
        for a in ([ax, ax_loss] if axis == "depth" else [ax]):
            a.set_xscale("log", base=2)
            a.set_xticks(widths)
            a.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{x:g}"))
            a.xaxis.set_minor_formatter(plt.NullFormatter())
            a.set_xlabel(axis)
        ax.set_ylabel("optimum log2 learning rate")
        ax.legend(fontsize="small", frameon=False)
        if axis == "depth":
            ax_loss.set_ylabel("best held-out loss")
            ax_loss.set_title("deeper is not worse", fontsize="medium")
    save_figure(fig, path)
    return fig
