"""The slope heatmap: the width exponent of every module at every step, the verdict at a glance.

Stage: figures (analysis side; never imports torch). Input: a slopes table (one row per
config, module, tensor, statistic and step, with the fitted ``slope`` of log2(value)
against log2(width); :func:`coordcheck.judge.slopes.fit_slopes`). Output: a matplotlib Figure,
saved as ``<path>.pdf`` and ``<path>.png`` when a path is given.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.font_manager import FontProperties

from coordcheck.plot.helpers import (
    FIGURE_WIDTH, SLIDE_HEIGHT, Size, check_columns, check_one_config, figure_style, module_order, nothing_left,
    save_figure, seaborn_modules, tensor_rank,
)
from coordcheck.judge.slopes import CONFIG_COLUMNS, SERIES_COLUMNS

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from matplotlib.figure import Figure

__all__ = ["plot_slopes", "SLOPE_CMAP", "SLOPE_CLIP", "MAX_STACKED_MODULES", "MAX_ANNOTATED", "MAX_ANNOTATED_ACROSS",
           "MIN_LABEL_PT"]

SLOPE_CMAP = "vlag"
SLOPE_CLIP = 1.0  # colour saturates at |slope| = 1
MAX_STACKED_MODULES = 40  # more heatmap rows than this: parametrizations side by side
MAX_ANNOTATED = 150  # heatmap panels with at most this many cells show the numbers
MAX_ANNOTATED_ACROSS = {"paper": 10, "slides": 18}  # ... and at most this many across the page
MIN_LABEL_PT = 4.0  # module names in the slope heatmap shrink to this, then every k-th is shown


def plot_slopes(
    slopes: pd.DataFrame,
    path: str | Path | None = None,
    *,
    stat: str = "std",
    tensor: str | None = None,
    size: Size = "paper",
    window_end: dict[str, int] | None = None,
    title: str | None = None,
) -> Figure:
    """The verdict at a glance: the width exponent of every module at every step.

    Reads a slopes table as :func:`coordcheck.judge.slopes.fit_slopes` makes it (columns
    ``config_id``, ``parametrization``, ``module``, ``layer_index``, ``tensor``, ``stat``,
    ``step``, ``slope``, ...), where ``slope`` is the least-squares slope of log2|value|
    against log2(width). One heatmap per ``parametrization`` (rows) and ``tensor``
    (columns; every non-loss tensor when ``tensor`` is None; all panels in one row when
    the model has many modules). In each, rows are modules by ``layer_index`` then name,
    labelled ``L{layer_index} {module}``, columns are steps, and colour is the slope on a
    diverging palette centred at 0 and saturating at +-1 (white = width-invariant, red =
    grows with width). Panels with few cells print the slopes; NaN slopes stay blank.
    Each parametrization must hold one configuration (one ``config_id``).
    ``window_end`` maps a parametrization to the last step the verdict judged (training
    turned unstable after it); later steps are hatched and labelled "not judged".
    ``title`` (e.g. "muP coordinate check — FAIL") becomes the figure's suptitle.

    Labels never overlap: the figure grows with the number of modules (up to 9 in on
    paper), module names shrink to fit their rows (down to 4 pt, then only every k-th is
    written) and step numbers are thinned to every k-th column.
    """
    check_columns(slopes, [*CONFIG_COLUMNS, *SERIES_COLUMNS, "slope"], "slopes table")
    data = slopes[(slopes["stat"] == stat) & (slopes["tensor"] != "loss")]
    if tensor is not None:
        data = data[data["tensor"] == tensor]
    if data.empty:
        raise ValueError(nothing_left(slopes, stat=stat, tensor=tensor))
    check_one_config(data, by=["parametrization"], what="parametrization")

    row_order = sorted(data["parametrization"].unique())
    col_order = sorted(data["tensor"].unique(), key=tensor_rank)
    modules = module_order(data)
    steps = np.sort(data["step"].unique())
    labels = [f"L{i} {m}" for i, m in zip(modules["layer_index"], modules["module"])]
    n_rows, n_cols = len(row_order), len(col_order)
    if n_rows * len(modules) > MAX_STACKED_MODULES:  # deep model: panels side by side
        n_rows, n_cols = 1, n_rows * n_cols
    # numbers only where they fit: few cells, and cells wide enough for "-0.05"
    annotate = (len(modules) * len(steps) <= MAX_ANNOTATED
                and len(steps) * n_cols <= MAX_ANNOTATED_ACROSS[size])

    sns, plt = seaborn_modules()
    width = FIGURE_WIDTH[size]
    if size == "slides":
        height = SLIDE_HEIGHT
    else:  # grow with the number of modules so that every row label stays readable
        height = min(9.0, n_rows * (0.6 + 0.16 * len(modules)) + 0.4)
    row_pt = 72 * (height - 0.6 - 0.4 * n_rows) / (n_rows * len(modules))  # points per module
    with figure_style(size, grid=False):
        tick_pt = FontProperties(size=matplotlib.rcParams["ytick.labelsize"]).get_size_in_points()
        label_pt = min(tick_pt, max(3.0, 0.8 * row_pt))
        # label every k-th step so that step numbers never run into each other
        step_in = (0.6 * len(str(steps.max())) + 1.0) * tick_pt / 72
        panel_in = (width - 2.5) / n_cols
        every_step = math.ceil(len(steps) / max(1, int(panel_in / step_in)))
        fig, axes = plt.subplots(n_rows, n_cols, figsize=(width, height), squeeze=False,
                                 sharex=True, sharey=True, layout="constrained")
        hatched = False
        for (par, ten), ax in zip(_facets(row_order, col_order), axes.flat):
            panel = data[(data["parametrization"] == par) & (data["tensor"] == ten)]
            grid = (panel.set_index(["layer_index", "module", "step"])["slope"]
                    .unstack("step")
                    .reindex(index=pd.MultiIndex.from_frame(modules), columns=steps))
            sns.heatmap(grid, ax=ax, cmap=SLOPE_CMAP, center=0, vmin=-SLOPE_CLIP,
                        vmax=SLOPE_CLIP, cbar=False, fmt=".2f",
                        annot=grid.round(2) + 0.0 if annotate else False,  # + 0.0: no "-0.00"
                        annot_kws={"fontsize": "x-small"}, yticklabels=labels, xticklabels=every_step,
                        linewidths=0.5 if row_pt > 8 else 0, linecolor="white")
            ax.set_title(f"{par} · {ten}")
            end = (window_end or {}).get(par)
            if end is not None and end < steps.max():
                first = int(np.searchsorted(steps, end, side="right"))  # first column not judged
                ax.axvspan(first, len(steps), facecolor="none", edgecolor="0.35", hatch="///", linewidth=0)
                ax.axvline(first, color="0.15", linewidth=1.2)
            hatched = hatched or (end is not None and end < steps.max())
            ax.set_xlabel("")
            ax.set_ylabel("")
            ax.tick_params(axis="y", rotation=0, labelsize=label_pt)
            ax.tick_params(axis="x", rotation=0)
        # one label under all the panels: a long one under each would run into its neighbour's
        fig.supxlabel("step (hatched: after the loss turned unstable, not judged)" if hatched else "step",
                      fontsize=matplotlib.rcParams["axes.labelsize"])
        mappable = axes.flat[0].collections[0]
        fig.colorbar(mappable, ax=axes, extend="both", shrink=0.8, aspect=30,
                     label=f"slope of log2 {stat} vs log2 width\n(colour clipped at ±{SLOPE_CLIP:g})")
        if title:
            fig.suptitle(title, fontweight="bold")
        _fit_heatmap_labels(fig, axes, labels, steps)
    save_figure(fig, path)
    return fig


def _facets(rows: Sequence, cols: Sequence):
    """(row level, column level) in the order FacetGrid / subplots lay out axes."""
    return [(r, c) for r in rows for c in cols]


def _fit_heatmap_labels(fig: Figure, axes: np.ndarray, labels: list[str], steps: np.ndarray) -> None:
    """Shrink the module names until each fits its row (then write every k-th), and write
    every k-th step so that step numbers leave a gap, also across neighbouring panels."""
    fig.draw_without_rendering()  # the layout engine places the panels
    renderer = fig.canvas.get_renderer()
    ax = axes.flat[0]
    origin, corner = ax.transData.transform([(0, 0), (1, 1)])
    row_px, col_px = abs(corner[1] - origin[1]), abs(corner[0] - origin[0])

    label_pt = ax.yaxis.get_major_ticks()[0].label1.get_fontsize()
    tallest = max(labels, key=len)
    height = renderer.get_text_width_height_descent(tallest, FontProperties(size=label_pt), ismath=False)[1]
    fit_pt = max(MIN_LABEL_PT, min(label_pt, label_pt * row_px / (1.15 * height)))
    every = max(1, math.ceil(1.15 * height * fit_pt / label_pt / row_px))  # text height scales with its size
    ticks = np.arange(len(labels))[::every]
    for ax in axes.flat:
        ax.set_yticks(ticks + 0.5, [labels[i] for i in ticks])
        ax.tick_params(axis="y", labelsize=fit_pt, rotation=0)

    step_pt = axes.flat[0].xaxis.get_major_ticks()[0].label1.get_fontsize()
    font = FontProperties(size=step_pt)
    wide = renderer.get_text_width_height_descent(str(int(steps.max())), font, ismath=False)[0]
    need = wide + 0.5 * step_pt / 72 * fig.dpi  # a label and half a character of gap
    gap = min((b.get_position().x0 - a.get_position().x1) * fig.get_figwidth() * fig.dpi
              for a, b in zip(axes.flat[:-1], axes.flat[1:])) if axes.shape[1] > 1 else np.inf
    n = len(steps)
    for every in range(1, n + 1):
        kept = np.arange(n)[::every]
        across = (n - kept[-1]) * col_px + gap  # last label of a panel to the first of the next
        if every * col_px >= need and across >= need:
            break
    for ax in axes.flat:
        ax.set_xticks(kept + 0.5, [str(steps[i]) for i in kept])
        ax.tick_params(axis="x", rotation=0)
