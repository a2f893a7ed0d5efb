"""The μTransfer figures (Tensor Programs V, figure 1): loss against log2 learning rate, and optimum against width.

Stage: figures (analysis side; never imports torch). Input: the curves and optima tables of
``coordcheck.transfer.fit``. Output: matplotlib figures, saved as PDF + PNG when a path is given.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from coordcheck.plot import (
    WIDTH_PALETTE,
    Size,
    facet_size,
    add_legend,
    legend_line,
    figure_style,
    save_figure,
    seaborn_modules,
)
from coordcheck.transfer.fit import PAR_ORDER

__all__ = ["plot_transfer", "plot_optima"]



def _par_order(values) -> list[str]:
    present = sorted(set(values))
    return [p for p in PAR_ORDER if p in present] + [p for p in present if p not in PAR_ORDER]


def plot_transfer(curves: pd.DataFrame, optima: pd.DataFrame, path: str | Path | None = None, *,
                  title: str | None = None, size: Size = "paper"):
    """Held-out loss against log2(lr), a line per width (light = narrow, dark = wide), a panel per
    parametrization on a shared y axis; each width's fitted optimum is a star, diverged learning rates
    are crosses along the top."""
    if curves.empty:
        raise ValueError("no held-out losses to plot")
    if curves.groupby("parametrization")["config_id"].nunique().max() > 1:
        raise ValueError("a parametrization holds several configurations: plot one at a time")
    sns, plt = seaborn_modules()
    cols = _par_order(curves["parametrization"])
    widths = np.sort(curves["width"].unique())
    palette = dict(zip(widths, sns.color_palette(WIDTH_PALETTE, len(widths))))
    facet_w, facet_h = facet_size(size, 1, len(cols), max_cols=2)
    finite = curves[np.isfinite(curves["loss"])]
    with figure_style(size):
        g = sns.FacetGrid(finite, col="parametrization", col_order=cols, sharey=True, height=facet_h,
                          aspect=facet_w / facet_h)
        g.map_dataframe(sns.lineplot, x="log2_lr", y="loss", hue="width", hue_order=list(widths), palette=palette,
                        marker="o", markersize=4, linewidth=1.4, legend=False)
        for par, ax in zip(cols, g.axes.flat):
            o = optima[(optima["parametrization"] == par) & np.isfinite(optima["optimum"])]
            for row in o.itertuples():
                ax.plot(row.optimum, row.optimum_loss, marker="*", markersize=11, color=palette[row.width],
                        markeredgecolor="black", markeredgewidth=0.6, linestyle="none", zorder=5)
            div = curves[(curves["parametrization"] == par) & ~np.isfinite(curves["loss"])]
            for row in div.itertuples():
                ax.plot(row.log2_lr, 0.97, marker="x", color=palette[row.width], transform=ax.get_xaxis_transform(),
                        linestyle="none", clip_on=False)
            ax.set_xticks(np.sort(curves["log2_lr"].unique()))
            ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{x:g}"))
        g.set_titles(col_template="{col_name}")
        g.set_axis_labels("log2 learning rate", "held-out loss")
        handles = {str(w): legend_line(palette[w], marker="o") for w in widths}
        handles["optimum (fit)"] = Line2D([], [], color="0.5", marker="*", markersize=9, markeredgecolor="black",
                                          markeredgewidth=0.6, linestyle="none")
        if (~np.isfinite(curves["loss"])).any():
            handles["diverged"] = Line2D([], [], color="0.3", marker="x", markersize=6, markeredgewidth=1.5,
                                         linestyle="none")
        add_legend(g.figure, handles, "width")
        if title:
            g.figure.suptitle(title, fontsize="medium", y=1.02)
    save_figure(g.figure, path)
    return g.figure


def plot_optima(optima: pd.DataFrame, path: str | Path | None = None, *, shifts: pd.DataFrame | None = None,
                size: Size = "paper"):
    """The fitted optimum log2(lr) against width (log2 axis), a line per parametrization, with its interval."""
    sns, plt = seaborn_modules()
    ok = optima[np.isfinite(optima["optimum"])]
    if ok.empty:
        raise ValueError("no width has a fitted optimum (see the report for why)")
    pars = _par_order(ok["parametrization"])
    colours = dict(zip(pars, sns.color_palette("colorblind", len(pars))))
    facet_w, facet_h = facet_size(size, 1, 1, max_cols=2)
    with figure_style(size):
        fig, ax = plt.subplots(figsize=(facet_w + 1.2, facet_h))
        for par in pars:
            o = ok[ok["parametrization"] == par].sort_values("width")
            label = par
            if shifts is not None:
                s = shifts[shifts["parametrization"] == par]
                if len(s) and math.isfinite(s["shift"].iloc[0]):
                    label = f"{par}: {s['shift'].iloc[0]:+.2f}/doubling ({s['status'].iloc[0]})"
            err = np.vstack([o["optimum"] - o["ci_low"], o["ci_high"] - o["optimum"]])
            ax.errorbar(o["width"], o["optimum"], yerr=np.where(np.isfinite(err), err, 0), marker="o", capsize=3,
                        color=colours[par], label=label)
        ax.set_xscale("log", base=2)
        widths = np.sort(optima["width"].unique())
        ax.set_xticks(widths)
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{x:g}"))
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
        ax.set_xlabel("width")
        ax.set_ylabel("optimum log2 learning rate")
        ax.legend(fontsize="small", frameon=False)
    save_figure(fig, path)
    return fig
