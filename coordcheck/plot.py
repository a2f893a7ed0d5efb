"""Figures: the coordinate-check grid, the slope heatmap and the loss curves.

Stage: figures (analysis side; never imports torch). Input: a tidy frame in the schema
of :mod:`coordcheck.frame` (one row per measurement) or a slopes table (one row per
config, module, tensor, statistic and step, with the fitted ``slope`` of log2(value)
against log2(width)). Output: a matplotlib Figure, and, when a path is given, the same
figure as ``<path>.pdf`` and ``<path>.png`` written atomically next to each other.
Seed spread is drawn as a min-max band (``errorbar=("pi", 100)``), never bootstrapped,
so that sweeps of tens of thousands of rows plot in about a second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import matplotlib
import numpy as np
import pandas as pd
from matplotlib import colormaps, rcsetup
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedFormatter, FixedLocator, LogFormatter, MaxNLocator, NullLocator

from coordcheck.frame import LOSS_MODULE, FrameError, atomic_write, conform
from coordcheck.slopes import CONFIG_COLUMNS, SERIES_COLUMNS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_coords", "plot_slopes", "plot_loss", "figure_style", "save_figure", "seaborn_modules", "FIGURE_WIDTH"]

Size = Literal["paper", "slides"]

# Total figure widths in inches, and the seaborn plotting context used at that size.
# "paper" spans a two-column page (~7 in); "slides" fills a 16:9 slide (12 x 6.75 in).
FIGURE_WIDTH = {"paper": 7.0, "slides": 12.0}
_SLIDE_HEIGHT = 6.75
_CONTEXT = {"paper": ("paper", 1.0), "slides": ("notebook", 1.15)}
_LEGEND_W = {"paper": 1.3, "slides": 2.0}  # room kept for the legend on the right

LAYER_CMAP = "viridis"
LAYER_CMAP_RANGE = (0.0, 0.85)  # viridis' last yellows vanish on white
WIDTH_PALETTE = "flare"
SLOPE_CMAP = "vlag"
SLOPE_CLIP = 1.0  # colour saturates at |slope| = 1
MAX_COLUMNS = 4  # default number of step columns in plot_coords
MAX_MODULE_LEGEND = 8  # more modules than this: legend by layer index
MAX_LAYER_LEGEND = 9  # more layer indices than this: show an evenly spaced subset
MAX_STACKED_MODULES = 40  # more heatmap rows than this: parametrizations side by side
MAX_ANNOTATED = 150  # heatmap panels with at most this many cells show the numbers
MAX_ANNOTATED_ACROSS = {"paper": 10, "slides": 18}  # ... and at most this many across the page
PNG_DPI = 200


def plot_coords(
    frame: pd.DataFrame,
    path: str | Path | None = None,
    *,
    stat: str = "std",
    tensor: str = "out",
    steps: Sequence[int] | None = None,
    row: str = "parametrization",
    size: Size = "paper",
) -> Figure:
    """The coordinate-check grid: ``stat`` of each module against width, one panel per step.

    Reads the columns ``width``, ``step``, ``seed``, ``module``, ``layer_index``,
    ``tensor``, ``stat``, ``value`` and ``row`` of a tidy frame. Panels: rows are the
    levels of ``row`` (``parametrization`` by default; ``tensor`` shows every tensor and
    ignores the ``tensor`` argument), columns are ``steps`` (default: up to four steps
    spread over the recorded ones, always the first and the last). In each panel, x is
    ``width`` on a log2 axis labelled with the widths present, y is ``value`` on a log
    axis, averaged over seeds in log space (a geometric mean) with the seed min-max as a
    band, one line per module coloured by ``layer_index``. Values that are not finite and
    positive are left out (a panel with none stays empty, marked "no values > 0"); for
    ``stat="mean"`` the magnitude |mean| is drawn. Under muP the lines are flat in width;
    a line that rises with width is a module whose coordinates blow up.

    Each row level must hold one configuration (one ``config_id``); filter the frame or
    facet by the varying column otherwise. Loss rows are ignored.
    """
    frame = conform(frame)
    frame = frame[frame["tensor"] != "loss"]
    _check_column(frame, row, "row")
    data = frame[frame["stat"] == stat]
    if row != "tensor":
        data = data[data["tensor"] == tensor]
    if data.empty:
        raise ValueError(_nothing_left(frame, stat=stat, tensor=None if row == "tensor" else tensor))
    _check_one_config(data, by=[row], what=f"row={row!r}")

    recorded = np.sort(data["step"].unique())
    steps = _pick_steps(recorded) if steps is None else _check_steps(steps, recorded)
    data = data[data["step"].isin(steps)]
    widths = np.sort(data["width"].unique())
    row_order = sorted(data[row].unique(), key=_tensor_rank if row == "tensor" else None)
    modules = _module_order(data)

    data = data.assign(value=data["value"].abs()) if stat == "mean" else data
    positive = np.isfinite(data["value"]) & (data["value"] > 0)  # what a log axis can show
    data = data.loc[positive, list(dict.fromkeys([row, "step", "module", "width", "value"]))]
    colours = _layer_colours(modules["layer_index"])
    palette = {m: colours[i] for m, i in zip(modules["module"], modules["layer_index"])}

    sns, _ = seaborn_modules()
    n_rows, n_cols = len(row_order), len(steps)
    facet_w, facet_h = _facet_size(size, n_rows, n_cols)
    crowded = {"paper": (3, 6), "slides": (6, 10)}[size]  # widths beyond which: rotate, thin
    rotate, thin = len(widths) > crowded[0], len(widths) > crowded[1]
    with figure_style(size):
        g = sns.FacetGrid(data, row=row, row_order=row_order, col="step", col_order=list(steps),
                          sharey="row", margin_titles=True, height=facet_h, aspect=facet_w / facet_h)
        for ax in g.axes.flat:  # scales before plotting: seaborn then averages seeds in log space
            _label_widths(ax, widths, rotate=rotate, every=2 if thin else 1)
            ax.set_yscale("log")
            _label_log_y(ax)
        g.map_dataframe(
            sns.lineplot, x="width", y="value",
            hue="module", hue_order=list(modules["module"]), palette=palette,
            errorbar=("pi", 100),  # seed min-max; the bootstrap is slow on large sweeps
            err_kws={"alpha": 0.15, "linewidth": 0}, linewidth=1.2,
            marker="o", markersize=3, markeredgewidth=0, legend=False,
        )  # ends with the grid's tight_layout, once the ticks are final
        g.set_titles(col_template="step {col_name}", row_template="")  # the row is named in the y label
        magnitude = "|mean|" if stat == "mean" else stat
        for ax in g.axes.flat:
            if not ax.lines:
                ax.text(0.5, 0.5, "no values > 0", transform=ax.transAxes,
                        ha="center", va="center", color="0.4", fontsize="small")
        g.set_axis_labels("width", "")
        for level, ax in zip(row_order, g.axes[:, 0]):
            label = f"{magnitude} of {level if row == 'tensor' else tensor}"
            ax.set_ylabel(f"{level}\n{label}" if row != "tensor" and len(row_order) > 1 else label)
        _legend(g.figure, *_layer_legend(modules, colours))
    save_figure(g.figure, path)
    return g.figure


def plot_slopes(
    slopes: pd.DataFrame,
    path: str | Path | None = None,
    *,
    stat: str = "std",
    tensor: str | None = None,
    size: Size = "paper",
    window_end: dict[str, int] | None = None,
) -> Figure:
    """The verdict at a glance: the width exponent of every module at every step.

    Reads a slopes table as :func:`coordcheck.slopes.fit_slopes` makes it (columns
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
    """
    _check_columns(slopes, [*CONFIG_COLUMNS, *SERIES_COLUMNS, "slope"], "slopes table")
    data = slopes[(slopes["stat"] == stat) & (slopes["tensor"] != "loss")]
    if tensor is not None:
        data = data[data["tensor"] == tensor]
    if data.empty:
        raise ValueError(_nothing_left(slopes, stat=stat, tensor=tensor))
    _check_one_config(data, by=["parametrization"], what="parametrization")

    row_order = sorted(data["parametrization"].unique())
    col_order = sorted(data["tensor"].unique(), key=_tensor_rank)
    modules = _module_order(data)
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
        height = _SLIDE_HEIGHT
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
        for (par, ten), ax in zip(_facets(row_order, col_order), axes.flat):
            last_row = ax.get_subplotspec().is_last_row()
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
            hatched = end is not None and end < steps.max()
            ax.set_xlabel(("step (hatched: after the loss turned unstable, not judged)" if hatched else "step")
                          if last_row else "")
            ax.set_ylabel("")
            ax.tick_params(axis="y", rotation=0, labelsize=label_pt)
            ax.tick_params(axis="x", rotation=0)
        mappable = axes.flat[0].collections[0]
        fig.colorbar(mappable, ax=axes, extend="both", shrink=0.8, aspect=30,
                     label=f"slope of log2 {stat} vs log2 width\n(colour clipped at ±{SLOPE_CLIP:g})")
    save_figure(fig, path)
    return fig


def plot_loss(
    frame: pd.DataFrame,
    path: str | Path | None = None,
    *,
    size: Size = "paper",
) -> Figure:
    """Training loss against step, one line per width, one panel per parametrization.

    Reads the loss rows of a tidy frame (``tensor == "loss"``, ``module == "(loss)"``,
    ``stat == "value"``): x is ``step``, y the mean over seeds of ``value`` with the seed
    min-max as a band, hue is ``width`` (light = narrow, dark = wide). Non-finite losses
    (divergence) are left out, so a diverged run's line ends at its last finite step. The
    y axis turns logarithmic (and the mean geometric) when the finite losses span more
    than two decades. Each parametrization must hold one configuration (one ``config_id``).
    """
    frame = conform(frame)
    data = frame[frame["tensor"] == "loss"]
    if data.empty:
        raise ValueError(f"no loss rows (tensor == 'loss', module == {LOSS_MODULE!r}) in the frame")
    _check_one_config(data, by=["parametrization"], what="parametrization")
    col_order = sorted(data["parametrization"].unique())
    widths = np.sort(data["width"].unique())
    data = data.loc[np.isfinite(data["value"]), ["parametrization", "width", "step", "value"]]

    sns, _ = seaborn_modules()
    palette = dict(zip(widths, sns.color_palette(WIDTH_PALETTE, len(widths))))
    n_cols = len(col_order)
    facet_w, facet_h = _facet_size(size, 1, n_cols, max_cols=2)
    values = data["value"]
    log_y = len(values) > 0 and values.min() > 0 and values.max() / values.min() > 100
    with figure_style(size):
        g = sns.FacetGrid(data, col="parametrization", col_order=col_order,
                          height=facet_h, aspect=facet_w / facet_h)
        for ax in g.axes.flat:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if log_y:
                ax.set_yscale("log")
        g.map_dataframe(
            sns.lineplot, x="step", y="value", hue="width", hue_order=list(widths), palette=palette,
            errorbar=("pi", 100),  # seed min-max; the bootstrap is slow on large sweeps
            err_kws={"alpha": 0.15, "linewidth": 0}, linewidth=1.4, legend=False,
        )
        g.set_titles(col_template="{col_name}")
        g.set_axis_labels("step", "loss")
        for ax in g.axes.flat:
            if not ax.lines:
                ax.text(0.5, 0.5, "no finite loss", transform=ax.transAxes,
                        ha="center", va="center", color="0.4", fontsize="small")
        _legend(g.figure, {str(w): _line(palette[w]) for w in widths}, "width")
    save_figure(g.figure, path)
    return g.figure


# --- helpers -------------------------------------------------------------------------


def seaborn_modules():
    """Import seaborn and pyplot, choosing the Agg backend if nobody chose one."""
    if dict.__getitem__(matplotlib.rcParams, "backend") is rcsetup._auto_backend_sentinel:
        matplotlib.use("Agg")  # files only: never open a window
    import matplotlib.pyplot as plt
    import seaborn as sns

    return sns, plt


def figure_style(size: Size, grid: bool = True) -> ExitStack:
    """Scoped seaborn theme (context + style): leaves the caller's rcParams alone."""
    sns, _ = seaborn_modules()
    context, scale = _CONTEXT[size]
    stack = ExitStack()
    stack.enter_context(sns.plotting_context(context, font_scale=scale))
    stack.enter_context(sns.axes_style("whitegrid" if grid else "white"))
    return stack


def _facet_size(size: Size, n_rows: int, n_cols: int, max_cols: int | None = None) -> tuple[float, float]:
    """(width, height) of one facet in inches, so the whole grid fits the chosen size."""
    room = FIGURE_WIDTH[size] - _LEGEND_W[size]
    facet_w = room / max(n_cols, 1)
    if max_cols is not None and n_cols < max_cols:  # a lone panel need not span the page
        facet_w = room / max_cols * 1.4
    if size == "slides":
        facet_h = min(facet_w * 1.2, _SLIDE_HEIGHT / max(n_rows, 1))  # fill the slide's height
    else:
        facet_h = min(facet_w * 0.8 + 0.6, 2.6)  # + room for titles and tick labels
    return facet_w, facet_h


def _facets(rows: Sequence, cols: Sequence):
    """(row level, column level) in the order FacetGrid / subplots lay out axes."""
    return [(r, c) for r in rows for c in cols]


def _pick_steps(recorded: np.ndarray, n: int = MAX_COLUMNS) -> list[int]:
    """Up to ``n`` recorded steps evenly spread, always the first and the last."""
    idx = np.unique(np.round(np.linspace(0, len(recorded) - 1, min(n, len(recorded)))).astype(int))
    return [int(recorded[i]) for i in idx]


def _check_steps(steps: Sequence[int], recorded: np.ndarray) -> list[int]:
    steps = [int(s) for s in steps]
    missing = sorted(set(steps) - set(recorded.tolist()))
    if missing or not steps:
        raise ValueError(f"steps {missing or steps} not recorded; recorded steps: {recorded.tolist()}")
    return steps


def _module_order(data: pd.DataFrame) -> pd.DataFrame:
    """Distinct (layer_index, module) pairs, by depth then name."""
    pairs = data[["layer_index", "module"]].drop_duplicates()
    return pairs.sort_values(["layer_index", "module"], ignore_index=True)


def _layer_colours(layer_index: pd.Series) -> dict[int, tuple]:
    """One colour per layer index, shallow = dark purple, deep = green."""
    cmap = colormaps[LAYER_CMAP]
    levels = np.sort(layer_index.unique())
    lo, hi = LAYER_CMAP_RANGE
    spread = np.linspace(lo, hi, len(levels)) if len(levels) > 1 else [lo]
    return {int(i): cmap(x) for i, x in zip(levels, spread)}


def _layer_legend(modules: pd.DataFrame, colours: dict[int, tuple]) -> tuple[dict, str]:
    """Legend entries: per module when few, else per layer index (subsampled when many)."""
    if len(modules) <= MAX_MODULE_LEGEND:
        handles = {f"{i}: {m}": _line(colours[i]) for i, m in zip(modules["layer_index"], modules["module"])}
        return handles, "layer index: module"
    levels = sorted(colours)
    if len(levels) > MAX_LAYER_LEGEND:  # every k-th depth, and the readout
        levels = sorted(set(levels[:: math.ceil(len(levels) / (MAX_LAYER_LEGEND - 1))]) | {levels[-1]})
    return {str(i): _line(colours[i]) for i in levels}, "layer index"


def _line(colour) -> Line2D:
    return Line2D([], [], color=colour, linewidth=2)


def _legend(fig: Figure, handles: dict, title: str) -> None:
    """Figure legend just right of the axes; ``bbox_inches="tight"`` keeps it in the files."""
    fig.legend(list(handles.values()), list(handles), title=title, loc="center left",
               bbox_to_anchor=(1.0, 0.5), frameon=False)


def _label_log_y(ax) -> None:
    """Plain numbers on a log y axis (0.5, 2, 100 rather than 5x10^-1), minor ticks too
    when the axis spans less than a decade, so a flat muP line still has a scale."""
    ax.yaxis.set_major_formatter(_PlainLogFormatter())
    ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False))


class _PlainLogFormatter(LogFormatter):
    """matplotlib's choice of which log ticks to label, written as 0.06 rather than 6e-02."""

    def __call__(self, x, pos=None):
        return f"{x:.3g}" if super().__call__(x, pos) else ""


def _label_widths(ax, widths: np.ndarray, rotate: bool = False, every: int = 1) -> None:
    """log2 x axis ticked at the widths present, written out (256, not 2^8); with
    ``every=2`` only every other tick is labelled (always the widest)."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(widths))
    keep = (len(widths) - 1 - np.arange(len(widths))) % every == 0
    ax.xaxis.set_major_formatter(FixedFormatter([str(int(w)) if k else "" for w, k in zip(widths, keep)]))
    ax.xaxis.set_minor_locator(NullLocator())
    lo, hi = float(widths.min()), float(widths.max())
    pad = 2 ** (0.15 * max(math.log2(hi / lo), 1.0))  # keep end markers off the frame
    ax.set_xlim(lo / pad, hi * pad)
    if rotate:
        ax.tick_params(axis="x", labelrotation=45)


def _tensor_rank(name: str) -> tuple[int, str]:
    order = {"out": 0, "delta": 1}
    return order.get(name, len(order)), name


def _check_column(df: pd.DataFrame, column: str, arg: str) -> None:
    if column not in df.columns:
        raise ValueError(f"{arg}={column!r} is not a column; columns: {list(df.columns)}")


def _check_columns(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise FrameError(f"not a {what}: missing columns {missing}")


def _check_one_config(data: pd.DataFrame, by: list[str], what: str) -> None:
    """Raise unless each group of ``by`` holds one config_id: lines must not average configs."""
    counts = data.groupby(by, observed=True)["config_id"].nunique()
    if (counts > 1).any():
        varying = [c for c in CONFIG_COLUMNS if c not in (*by, "config_id") and c in data
                   and data.groupby(by, observed=True)[c].nunique().gt(1).any()]
        raise ValueError(
            f"several configurations per {what} ({counts.max()} config_ids"
            + (f"; varying: {', '.join(varying)}" if varying else "")
            + "): filter the frame to one configuration per panel first"
        )


def _nothing_left(df: pd.DataFrame, stat: str, tensor: str | None) -> str:
    tensors = sorted(set(df["tensor"]) - {"loss"})
    stats = sorted(set(df["stat"]) - {"value"})
    want = f"stat={stat!r}" + (f", tensor={tensor!r}" if tensor is not None else "")
    return f"no rows with {want}; present: stats {stats}, tensors {tensors}"


def save_figure(fig: Figure, path: str | Path | None) -> None:
    """Write ``fig`` to ``<path>.pdf`` and ``<path>.png`` (a .pdf/.png suffix is replaced)."""
    if path is None:
        return
    path = Path(path)
    base = path.with_suffix("") if path.suffix.lower() in (".pdf", ".png") else path
    for fmt in ("pdf", "png"):
        target = base.with_name(f"{base.name}.{fmt}")
        # the temporary name ends in .tmp, so the format is given explicitly
        atomic_write(target, lambda tmp, fmt=fmt: fig.savefig(
            tmp, format=fmt, dpi=PNG_DPI, bbox_inches="tight"))
