"""Figures: the coordinate-check figure (grid or guide layout), the slope heatmap and the loss curves.

Stage: figures (analysis side; never imports torch). Input: a tidy frame in the schema
of :mod:`coordcheck.frame` (one row per measurement) or a slopes table (one row per
config, module, tensor, statistic and step, with the fitted ``slope`` of log2(value)
against log2(width)). Output: a matplotlib Figure, and, when a path is given, the same
figure as ``<path>.pdf`` and ``<path>.png`` written atomically next to each other.
Seed spread is drawn as a min-max band (``errorbar=("pi", 100)``), never bootstrapped,
so that sweeps of tens of thousands of rows plot in about a second.

:func:`plot_coords` has two layouts. ``"grid"``: one panel per step, one line per module
(colour = layer index, marker and dashes = role, the ``highlight`` modules thick and in a
legend of their own). ``"guide"``, the layout of published muP guides: one panel per kind
of activation, one line per step. The kind of a module (:func:`activation_kind`):

* role ``input`` -> "embedding"; role ``attention`` -> "attention logits"; role
  ``output`` -> "output logits", of which only the model's output (the output module with
  the largest ``call_order``) is drawn; role ``norm`` -> left out.
* role ``hidden``, by the parts of the dotted module name, deepest first, each split at
  ``_`` and without trailing digits: ``attn``/``attention``/``self_attn`` -> "attention
  output"; ``mlp``/``ffn``/``feed_forward``/``fc``/``w1``/``w2``/``w3`` -> "MLP output";
  anything else -> "hidden".
* Per model: when some hidden module is attention output (a transformer), each attention
  and MLP sub-block is represented by the last module to run in it (its output projection:
  ``c_proj``, ``o_proj``, ``w2``; not q/k/v or the up-projection), and the other "hidden"
  modules (block outputs) are left out; when none is (an MLP, a ResNet), every hidden
  module, ``fc`` layers included, forms one "hidden" panel.

Within a kind, the modules are pooled by the geometric mean of the statistic over the
kind's modules at each (width, seed, step) (values that are not finite and positive left
out), then the seeds are averaged in log space like the grid's lines.
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
from matplotlib import colormaps, patheffects, rcsetup
from matplotlib.font_manager import FontProperties
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedFormatter, FixedLocator, MaxNLocator, NullLocator

from coordcheck.frame import LOSS_MODULE, FrameError, atomic_write, conform
from coordcheck.slopes import CONFIG_COLUMNS, SERIES_COLUMNS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_coords", "plot_slopes", "plot_loss", "activation_kind", "figure_style", "save_figure", "facet_size",
           "add_legend", "legend_line", "seaborn_modules", "FIGURE_WIDTH", "KINDS", "Layout"]

Size = Literal["paper", "slides"]
Layout = Literal["grid", "guide"]

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

# layout="grid": a module's role gives its marker and dash pattern ("" = solid), its layer its colour
ROLE_STYLE = {
    "input": ("s", ""),
    "hidden": ("o", ""),
    "attention": ("^", (4, 1.5)),
    "norm": ("D", (1, 1.5)),
    "output": ("*", (6, 1.5, 1.5, 1.5)),
}
HIGHLIGHT_COLOURS = ("#d62728", "#ff7f0e", "#000000", "#e377c2", "#8c564b", "#17becf")  # off viridis
HIGHLIGHT_WIDTH = 2.2
NOT_JUDGED_FACE = "0.93"  # panels of steps after the judged window (the loss turned unstable)

# layout="guide": panels in this order (see activation_kind), one line per step
KINDS = ("embedding", "attention logits", "attention output", "MLP output", "hidden", "output logits")
_ROLE_KIND = {"input": "embedding", "attention": "attention logits", "output": "output logits"}
_ATTENTION_PARTS = frozenset({"attn", "attention", "self_attn"})
_MLP_PARTS = frozenset({"mlp", "ffn", "feed_forward", "fc", "w1", "w2", "w3"})
STEP_PALETTE = "flare"  # light = early, dark = late
MAX_GUIDE_STEPS = 11  # default number of step lines in the guide layout

_STEP_LEGEND_W = {"paper": 0.7, "slides": 1.2}  # a step legend is narrow: wider panels
_GUIDE_MIN_HEIGHT = {"paper": 2.2, "slides": 0.0}  # five narrow panels on a page still get a y scale
_LOG_MANTISSAS = ((1,), (1, 3), (1, 2, 5), (1, 1.5, 2, 3, 5, 7))  # round values on a log y axis, sparse first

MIN_LABEL_PT = 4.0  # module names in the slope heatmap shrink to this, then every k-th is shown


def plot_coords(
    frame: pd.DataFrame,
    path: str | Path | None = None,
    *,
    stat: str = "std",
    tensor: str | Sequence[str] = "out",
    steps: Sequence[int] | None = None,
    row: str = "parametrization",
    size: Size = "paper",
    layout: Layout = "grid",
    title: str | None = None,
    highlight: Sequence[str] = (),
    include_steps: Sequence[int] = (),
    window_end: dict | None = None,
) -> Figure:
    """The coordinate-check figure: ``stat`` of the activations against width.

    Reads the columns ``width``, ``step``, ``seed``, ``module``, ``layer_index``,
    ``role``, ``call_order``, ``tensor``, ``stat``, ``value`` and ``row`` of a tidy frame.
    Rows of panels are the levels of ``row`` (``parametrization`` by default; ``tensor``
    shows every tensor and ignores the ``tensor`` argument), and, when ``tensor`` names
    several tensors (``["out", "delta"]``), each level once per tensor. In every panel x is ``width``
    on a log2 axis labelled with the widths present and y is ``value`` on a log axis,
    averaged over seeds in log space (a geometric mean) with the seed min-max as a band.
    Values that are not finite and positive are left out (a panel with none stays empty,
    marked "no values > 0"); for ``stat="mean"`` the magnitude |mean| is drawn. Under muP
    every line is flat in width; a line that rises with width is a blow-up.

    ``layout="grid"``: columns are ``steps`` (default: up to four steps spread over the
    judged ones, always the first and the last, see below), one line per module, coloured by
    ``layer_index`` (dark = shallow), with the marker and dash pattern of its ``role``
    (:data:`ROLE_STYLE`: input squares, hidden circles, attention triangles dashed, norm
    diamonds dotted, output stars dash-dotted). The modules named in ``highlight`` (e.g.
    the verdict's worst offenders; names not in the frame are ignored) are drawn thick,
    on top, in colours of their own, and listed in a legend below the panels; the other
    lines are then faded.

    ``layout="guide"``, as in published muP guides: columns are kinds of activation
    (:func:`activation_kind`), in the order embedding, attention logits, attention
    output, MLP output (or hidden), output logits, each only when present; one line per
    step (default: every recorded step, at most 11 spread evenly) from light (early) to
    dark (late), with a step legend. Within a kind, the modules are combined by the
    geometric mean of ``value`` for each (width, seed, step), then the seeds are averaged
    in log space as in the grid. ``highlight`` does not apply.

    Default steps (``steps=None``) show the verdict's evidence: ``window_end`` maps a level
    of ``row`` to the last step its verdict judged (training turned unstable after it);
    the spread is taken over the steps up to the latest of them, the last recorded step is
    added when it lies beyond (marked "not judged": a grey panel in the grid, in the step
    legend of the guide), and ``include_steps`` (e.g. the step of each configuration's worst
    series) are always shown. Given ``steps`` are shown as they are.
    :func:`coordcheck.report.coord_figure_options` gives these from a verdict.

    ``title`` (e.g. "coordinate check (parametrization=mup) — PASS") becomes the figure's suptitle, above
    the panels. Each row level must hold one configuration (one ``config_id``); filter
    the frame or facet by the varying column otherwise. Loss rows are ignored.
    """
    if layout not in ("grid", "guide"):
        raise ValueError(f"layout must be 'grid' or 'guide', got {layout!r}")
    frame = conform(frame)
    frame = frame[frame["tensor"] != "loss"]
    _check_column(frame, row, "row")
    tensors = [tensor] if isinstance(tensor, str) else list(dict.fromkeys(tensor))
    data = frame[frame["stat"] == stat]
    if row != "tensor":
        data = data[data["tensor"].isin(tensors)]
    if data.empty:
        raise ValueError(_nothing_left(frame, stat=stat, tensor=None if row == "tensor" else ", ".join(tensors)))
    _check_one_config(data, by=[row], what=f"row={row!r}")

    recorded = np.sort(data["step"].unique())
    n_steps = MAX_COLUMNS if layout == "grid" else MAX_GUIDE_STEPS
    judged_until = max(window_end.values()) if window_end else None
    if steps is None:
        steps = _default_steps(recorded, n_steps, judged_until, include_steps)
    else:
        steps = _check_steps(steps, recorded)
        judged_until = None  # steps chosen by hand: titled as they are
    data = data[data["step"].isin(steps)]
    levels = sorted(data[row].unique(), key=_tensor_rank if row == "tensor" else None)
    data = data.assign(value=data["value"].abs()) if stat == "mean" else data
    magnitude = "|mean|" if stat == "mean" else stat
    if row == "tensor" or len(tensors) == 1:
        row_order = levels
        ylabels = [f"{magnitude} of {level if row == 'tensor' else tensors[0]}" for level in levels]
    else:  # a row per (level, tensor): the tensors of one level next to each other
        row, panels = _PANEL_ROW, data[row].astype(str) + " · " + data["tensor"]
        data = data.assign(**{row: panels})
        row_order = [f"{level} · {t}" for level in levels for t in sorted(tensors, key=_tensor_rank)
                     if f"{level} · {t}" in set(panels)]
        ylabels = [f"{magnitude} of {label.rsplit(' · ', 1)[1]}" for label in row_order]
        levels = [label.rsplit(" · ", 1)[0] for label in row_order]
    if row != "tensor" and len(set(levels)) > 1:
        ylabels = [f"{level}\n{label}" for level, label in zip(levels, ylabels)]
    draw = _coord_grid if layout == "grid" else _coord_guide
    fig = draw(data, steps=list(steps), row=row, row_order=row_order, size=size, ylabels=ylabels,
               highlight=list(highlight), title=title, judged_until=judged_until)
    save_figure(fig, path)
    return fig


_PANEL_ROW = "(panel)"  # the row of panels when it holds one level of ``row`` and one tensor


def _default_steps(recorded: np.ndarray, n: int, judged_until: int | None, include: Sequence[int]) -> list[int]:
    """Up to ``n`` steps spread over the judged ones (all when ``judged_until`` is None), the last recorded step
    when it lies beyond them, and every recorded step of ``include``."""
    judged = recorded if judged_until is None else recorded[recorded <= judged_until]
    shown = set(_pick_steps(judged if len(judged) else recorded, n))
    if len(judged) < len(recorded):
        shown.add(int(recorded[-1]))
    return sorted(shown | ({int(s) for s in include} & set(recorded.tolist())))


def activation_kind(module: str, role: str) -> str | None:
    """The kind of activation a module produces: the panel it joins in the guide layout.

    By ``role`` first: ``input`` -> "embedding", ``attention`` -> "attention logits",
    ``output`` -> "output logits" (the guide keeps only the model's output: the output
    module that runs last), ``norm`` and ``loss`` -> None (not shown). A ``hidden``
    module is classified by the parts of its dotted name, deepest first, each split at
    ``_`` and with trailing digits dropped: ``attn``/``attention``/``self_attn`` ->
    "attention output"; ``mlp``/``ffn``/``feed_forward``/``fc``/``w1``/``w2``/``w3`` ->
    "MLP output"; else "hidden". So ``model.layers.3.self_attn.o_proj`` and
    ``h.3.attn.c_attn`` are attention output, ``model.layers.3.mlp.down_proj`` and
    ``layers.3.feed_forward.w2`` are MLP output, ``blocks.3`` is hidden.
    """
    if role in _ROLE_KIND:
        return _ROLE_KIND[role]
    if role != "hidden":
        return None
    return _sub_block(module)[0]


def _sub_block(module: str) -> tuple[str, str]:
    """(kind, the attention / MLP sub-block it sits in) of a hidden module: the kind from the
    deepest matching name part, the sub-block up to the outermost part of that kind
    (``h.0.mlp.c_fc`` -> MLP output in ``h.0.mlp``)."""
    parts = module.lower().split(".")
    kinds = []
    for part in parts:
        tokens = {part, *part.split("_")}
        tokens |= {t.rstrip("0123456789") for t in tokens}
        kinds.append("attention output" if tokens & _ATTENTION_PARTS else "MLP output" if tokens & _MLP_PARTS else None)
    found = [i for i, k in enumerate(kinds) if k is not None]
    if not found:
        return "hidden", module
    kind = kinds[found[-1]]
    outer = next(i for i in found if kinds[i] == kind)
    return kind, ".".join(parts[: outer + 1])


def _coord_grid(data: pd.DataFrame, *, steps: list[int], row: str, row_order: list, size: Size,
                ylabels: list[str], highlight: list[str], title: str | None, judged_until: int | None) -> Figure:
    """Panels (row level, step); one line per module: colour = layer index, style = role; the steps after
    ``judged_until`` titled "not judged"."""
    widths = np.sort(data["width"].unique())
    modules = _module_order(data)
    modules["role"] = modules["module"].map(data.drop_duplicates("module").set_index("module")["role"])
    picked = [m for m in dict.fromkeys(highlight) if m in set(modules["module"])]
    positive = np.isfinite(data["value"]) & (data["value"] > 0)  # what a log axis can show
    data = data.loc[positive, list(dict.fromkeys([row, "step", "module", "role", "width", "value"]))]
    colours = _layer_colours(modules["layer_index"])
    palette = {m: colours[i] for m, i in zip(modules["module"], modules["layer_index"])}
    hot = {m: HIGHLIGHT_COLOURS[k % len(HIGHLIGHT_COLOURS)] for k, m in enumerate(picked)}
    role_order = [r for r in ROLE_STYLE if r in set(modules["role"])]
    role_order += sorted(set(modules["role"]) - set(role_order))
    markers = {r: ROLE_STYLE.get(r, ROLE_STYLE["hidden"])[0] for r in role_order}
    dashes = {r: ROLE_STYLE.get(r, ROLE_STYLE["hidden"])[1] for r in role_order}
    styled = {m: (markers[r], dashes[r]) for m, r in zip(modules["module"], modules["role"])}
    many = len(modules) > MAX_MODULE_LEGEND
    line_w, marker_s = (0.9, 3.0) if many else (1.2, 4.0)
    common = dict(x="width", y="value", style="role", style_order=role_order, markers=markers, dashes=dashes,
                  errorbar=("pi", 100),  # seed min-max; the bootstrap is slow on large sweeps
                  markeredgewidth=0, legend=False)

    sns, _ = seaborn_modules()
    facet_w, facet_h = facet_size(size, len(row_order), len(steps))
    with figure_style(size):
        g = _log_width_facets(data, widths, row=row, row_order=row_order, col="step", col_order=steps, sharey="row",
                              facet=(facet_w, facet_h))
        rest = [m for m in modules["module"] if m not in hot]
        g.map_dataframe(
            _lineplot_subset, keep=rest, **common, hue="module", hue_order=rest, palette=palette,
            err_kws={"alpha": 0.08 if many else 0.15, "linewidth": 0}, linewidth=line_w,
            markersize=marker_s, alpha=0.45 if hot else 1.0,  # faded behind the highlighted modules
        )
        if hot:  # thick, on top, with a white halo that lifts them off the others
            halo = [patheffects.Stroke(linewidth=HIGHLIGHT_WIDTH + 1.6, foreground="white"), patheffects.Normal()]
            g.map_dataframe(
                _lineplot_subset, keep=picked, **common, hue="module", hue_order=picked, palette=hot,
                err_kws={"alpha": 0.2, "linewidth": 0}, linewidth=HIGHLIGHT_WIDTH, markersize=marker_s + 2,
                zorder=3, path_effects=halo,
            )
        g.set_titles(col_template="step {col_name}", row_template="")  # the row is named in the y label
        _finish_facets(g, widths, ylabels, title)
        for ax, step in zip(g.axes.flat, steps * len(row_order)):  # after the window: grey, "not judged"
            if judged_until is not None and step > judged_until:
                ax.set_facecolor(NOT_JUDGED_FACE)
                ax.text(0.5, 0.96, "not judged", transform=ax.transAxes, ha="center", va="top", color="0.3",
                        fontsize="x-small", zorder=5,
                        bbox={"facecolor": NOT_JUDGED_FACE, "edgecolor": "none", "pad": 1})
        shown = modules if many else modules[~modules["module"].isin(picked)]  # highlighted: own legend
        handles, legend_title = _layer_legend(shown, colours, styled)
        legends = [add_legend(g.figure, handles, legend_title)]
        if many and len(role_order) > 1:  # the module legend above shows each module's style
            roles = {r: legend_line("0.35", markers[r], dashes[r]) for r in role_order}
            legends.append(add_legend(g.figure, roles, "role"))
        _stack_legends(g.figure, legends)
        if hot:
            _highlight_legend(g.figure, {f"L{i} {m}": legend_line(hot[m], *styled[m], linewidth=HIGHLIGHT_WIDTH)
                                         for m, i in zip(modules["module"], modules["layer_index"]) if m in hot},
                              size)
    return g.figure


def _log_width_facets(data: pd.DataFrame, widths: np.ndarray, *, row: str, row_order: list, col: str,
                      col_order: list, sharey: str, facet: tuple[float, float]):
    """A FacetGrid whose panels have width on a log2 axis (labelled with ``widths``) and a log y axis."""
    sns, _ = seaborn_modules()
    facet_w, facet_h = facet
    g = sns.FacetGrid(data, row=row, row_order=row_order, col=col, col_order=col_order, sharey=sharey,
                      margin_titles=True, height=facet_h, aspect=facet_w / facet_h)
    for ax in g.axes.flat:  # scales before plotting: seaborn then averages seeds in log space
        _label_widths(ax, widths)
        ax.set_yscale("log")
    return g


def _lineplot_subset(*args, keep: list[str], data: pd.DataFrame, **kwargs) -> None:
    """``sns.lineplot`` on the rows of ``data`` whose module is in ``keep``."""
    sns, _ = seaborn_modules()
    subset = data[data["module"].isin(keep)]
    if not subset.empty:
        sns.lineplot(*args, data=subset, **kwargs)


def _coord_guide(data: pd.DataFrame, *, steps: list[int], row: str, row_order: list, size: Size,
                 ylabels: list[str], highlight: list[str], title: str | None, judged_until: int | None) -> Figure:
    """Panels (row level, kind of activation); one line per step, modules pooled by geometric mean."""
    widths = np.sort(data["width"].unique())
    data = data.assign(kind=_kinds(data, row))
    data = data[data["kind"].notna()]
    if data.empty:
        raise ValueError("no module has a kind of activation that layout='guide' shows "
                         "(roles input, attention, hidden, output): use layout='grid'")
    kinds = [k for k in KINDS if k in set(data["kind"])]
    data = data[np.isfinite(data["value"]) & (data["value"] > 0)]
    keys = list(dict.fromkeys([row, "kind", "step", "width", "seed"]))
    pooled = (data.assign(value=np.log(data["value"]))  # geometric mean over the kind's modules
              .groupby(keys, observed=True)["value"].mean().pipe(np.exp).reset_index())
    sns, _ = seaborn_modules()
    palette = dict(zip(steps, sns.color_palette(STEP_PALETTE, len(steps))))

    facet_w, facet_h = facet_size(size, len(row_order), len(kinds), legend_w=_STEP_LEGEND_W[size])
    facet_h = max(facet_h, _GUIDE_MIN_HEIGHT[size])  # narrow panels, but tall enough for a scale
    with figure_style(size):
        g = _log_width_facets(pooled, widths, row=row, row_order=row_order, col="kind", col_order=kinds, sharey="col",
                              facet=(facet_w, facet_h))
        g.map_dataframe(
            sns.lineplot, x="width", y="value", hue="step", hue_order=steps, palette=palette,
            errorbar=("pi", 100), err_kws={"alpha": 0.12, "linewidth": 0}, linewidth=1.3,
            marker="o", markersize=3.5, markeredgewidth=0, legend=False,
        )
        g.set_titles(col_template="{col_name}", row_template="")  # the row is named in the y label
        _finish_facets(g, widths, ylabels, title)
        drawn = set(pooled["step"]) or set(steps)  # no delta at step 0: no legend entry either
        late = judged_until is not None
        add_legend(g.figure, {f"{s} (not judged)" if late and s > judged_until else str(s): legend_line(palette[s], "o")
                              for s in steps if s in drawn}, "step")
    return g.figure


def _kinds(data: pd.DataFrame, row: str) -> pd.Series:
    """:func:`activation_kind` of every row of ``data``, with the rules that need the whole
    model: only the last output module to run (per ``row`` level) is the output logits;
    hidden modules are split into attention output and MLP output only when some are
    attention output (a transformer) — each attention / MLP sub-block represented by the
    last module to run in it (its output projection), the others then left out; otherwise (an
    MLP, a ResNet, whatever their layers are called) they all are "hidden"."""
    pairs = data[["module", "role"]].drop_duplicates()
    kind = {(m, r): activation_kind(m, r) for m, r in pairs.itertuples(index=False)}
    kinds = pd.Series([kind[mr] for mr in zip(data["module"], data["role"])], index=data.index, dtype=object)
    if (kinds == "attention output").any():
        kinds[kinds == "hidden"] = None
        # a sub-block's output is what its last module to run returns (c_proj, o_proj, w2), not q/k/v
        sub = kinds.isin(["attention output", "MLP output"])
        block = data.loc[sub, "module"].map(lambda m: _sub_block(m)[1])
        last = data.loc[sub].groupby([data.loc[sub, row], block], observed=True)["call_order"].transform("max")
        kinds[sub & (data["call_order"] != last.reindex(data.index))] = None
    else:
        kinds[kinds.isin(["attention output", "MLP output"])] = "hidden"
    output = data["role"] == "output"
    last = data.loc[output].groupby(row, observed=True)["call_order"].transform("max")
    kinds[output & (data["call_order"] != last.reindex(data.index))] = None
    return kinds


def _finish_facets(g, widths: np.ndarray, ylabels: list[str], title: str | None) -> None:
    """Labels, empty-panel notes, the suptitle, y ticks that fit each panel and width labels
    that never touch; the tight layout is redone once the tick labels are final."""
    fig = g.figure
    for ax in g.axes.flat:
        if not ax.lines:
            ax.text(0.5, 0.5, "no values > 0", transform=ax.transAxes,
                    ha="center", va="center", color="0.4", fontsize="small")
    g.set_axis_labels("width", "")
    for label, ax in zip(ylabels, g.axes[:, 0]):
        ax.set_ylabel(label)
    if title:
        fig.suptitle(title, fontweight="bold")
        g.tight_layout()  # room for the title before the panel heights are read
    for ax in g.axes.flat:
        _label_log_y(ax)
    g.tight_layout()
    _fit_width_labels(g.axes.flat, widths)
    _fit_titles(g.axes[0])


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
    ``title`` (e.g. "muP coordinate check — FAIL") becomes the figure's suptitle.

    Labels never overlap: the figure grows with the number of modules (up to 9 in on
    paper), module names shrink to fit their rows (down to 4 pt, then only every k-th is
    written) and step numbers are thinned to every k-th column.
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
    facet_w, facet_h = facet_size(size, 1, n_cols, max_cols=2)
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
        add_legend(g.figure, {str(w): legend_line(palette[w]) for w in widths}, "width")
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


def facet_size(size: Size, n_rows: int, n_cols: int, max_cols: int | None = None,
               legend_w: float | None = None) -> tuple[float, float]:
    """(width, height) of one facet in inches, so the whole grid fits the chosen size
    with ``legend_w`` inches (default: :data:`_LEGEND_W`) kept for the legend."""
    room = FIGURE_WIDTH[size] - (_LEGEND_W[size] if legend_w is None else legend_w)
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


def _layer_colours(layer_index: pd.Series) -> dict[int, tuple]:
    """One colour per layer index, shallow = dark purple, deep = green."""
    cmap = colormaps[LAYER_CMAP]
    levels = np.sort(layer_index.unique())
    lo, hi = LAYER_CMAP_RANGE
    spread = np.linspace(lo, hi, len(levels)) if len(levels) > 1 else [lo]
    return {int(i): cmap(x) for i, x in zip(levels, spread)}


def _layer_legend(modules: pd.DataFrame, colours: dict[int, tuple],
                  styled: dict[str, tuple] | None = None) -> tuple[dict, str]:
    """Legend entries: per module when few (with its role's marker and dashes from
    ``styled``), else per layer index (subsampled when many)."""
    if len(modules) <= MAX_MODULE_LEGEND:
        handles = {f"{i}: {m}": legend_line(colours[i], *(styled or {}).get(m, ()))
                   for i, m in zip(modules["layer_index"], modules["module"])}
        return handles, "layer index: module"
    levels = sorted(colours)
    if len(levels) > MAX_LAYER_LEGEND:  # every k-th depth, and the readout
        levels = sorted(set(levels[:: math.ceil(len(levels) / (MAX_LAYER_LEGEND - 1))]) | {levels[-1]})
    return {str(i): legend_line(colours[i]) for i in levels}, "layer index"


def legend_line(colour, marker: str | None = None, dashes="", linewidth: float = 2) -> Line2D:
    """A legend handle: a line of ``colour`` with an optional marker and dashes."""
    line = Line2D([], [], color=colour, linewidth=linewidth, marker=marker, markersize=5, markeredgewidth=0)
    if dashes:
        line.set_dashes(dashes)
    return line


def add_legend(fig: Figure, handles: dict, title: str) -> Legend:
    """Figure legend just right of the axes; ``bbox_inches="tight"`` keeps it in the files."""
    return fig.legend(list(handles.values()), list(handles), title=title, loc="center left",
                      bbox_to_anchor=(1.0, 0.5), frameon=False)


def _stack_legends(fig: Figure, legends: list[Legend], gap_pt: float = 8.0) -> None:
    """Legends right of the axes one under the other, the stack centred on the figure's height."""
    if len(legends) < 2:
        return
    renderer = fig.canvas.get_renderer()
    fig_h = fig.get_figheight() * fig.dpi
    heights = [lg.get_window_extent(renderer).height / fig_h for lg in legends]
    gap = gap_pt / 72 * fig.dpi / fig_h
    top = 0.5 + (sum(heights) + gap * (len(legends) - 1)) / 2
    for legend, height in zip(legends, heights):
        legend.set_loc("upper left")
        legend.set_bbox_to_anchor((1.0, top), transform=fig.transFigure)
        top -= height + gap


def _highlight_legend(fig: Figure, handles: dict, size: Size) -> None:
    """The highlighted modules below the panels, in as many columns as the page width holds."""
    font_pt = _font_pt("legend.fontsize")
    entry_in = (0.6 * max(map(len, handles)) * font_pt + 40) / 72  # label + handle + gaps
    ncol = max(1, min(len(handles), int(FIGURE_WIDTH[size] // entry_in)))
    fig.legend(list(handles.values()), list(handles), title="highlighted modules", loc="upper center",
               bbox_to_anchor=(0.5, 0.0), ncol=ncol, frameon=False)


def _font_pt(key: str) -> float:
    """A font size from the current rcParams ("small", 9, ...) in points."""
    return FontProperties(size=matplotlib.rcParams[key]).get_size_in_points()


def _label_log_y(ax) -> None:
    """A few round values labelled as plain numbers (0.5, 2, 100) on a log y axis, chosen
    from the final limits and the panel's height: the sparsest of decades, 1-3, 1-2-5,
    1-1.5-2-3-5-7 that gives three labels, never closer than 1.6 label heights (decades
    are thinned, a narrow axis gets linear round values), so that a flat muP line still
    has a scale and labels never touch."""
    lo, hi = ax.get_ylim()
    if not (0 < lo < hi):
        return
    span = math.log10(hi / lo)
    height_pt = ax.get_position().height * ax.figure.get_figheight() * 72
    min_gap = 1.6 * _font_pt("ytick.labelsize") / height_pt * span  # in decades

    def fits(ticks):
        return len(ticks) < 2 or np.diff(np.log10(ticks)).min() >= min_gap

    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    best: list[float] = []
    for mantissas in _LOG_MANTISSAS:
        ticks = [m * 10.0**k for k in decades for m in mantissas if lo <= m * 10.0**k <= hi]
        if not fits(ticks):
            break
        best = ticks
        if len(ticks) >= 3:
            break
    if not best:  # even decades are too close: every k-th decade
        ticks = [10.0**k for k in decades if lo <= 10.0**k <= hi]
        every = math.ceil(min_gap)
        best = ticks[::-1][::every][::-1]
    if len(best) < 2:  # less than a factor of ~1.5 in view: linear round values
        n = max(2, min(4, int(span / min_gap) if min_gap > 0 else 4))
        best = [t for t in MaxNLocator(nbins=n).tick_values(lo, hi) if lo <= t <= hi and t > 0]
        while len(best) > 1 and not fits(best):
            best = best[::2]
    ax.yaxis.set_major_locator(FixedLocator(best))
    digits = next(d for d in range(3, 10) if len({_plain_number(t, d) for t in best}) == len(best) or d == 9)
    ax.yaxis.set_major_formatter(FixedFormatter([_plain_number(t, digits) for t in best]))
    ax.yaxis.set_minor_locator(NullLocator())


def _plain_number(x: float, digits: int = 3) -> str:
    """0.03, 1.5, 1000 as written by hand (``digits`` significant digits at most); 1e-05
    and 2e+06 as 1e-5 and 2e6."""
    if 1e-4 <= abs(x) < 1e6:
        return np.format_float_positional(float(f"{x:.{digits}g}"), trim="-")
    mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def _label_widths(ax, widths: np.ndarray, every: int = 1) -> None:
    """log2 x axis ticked at the widths present, written out (256, not 2^8); with
    ``every=k`` only every k-th tick is labelled (always the widest)."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(widths))
    keep = (len(widths) - 1 - np.arange(len(widths))) % every == 0
    ax.xaxis.set_major_formatter(FixedFormatter([str(int(w)) if k else "" for w, k in zip(widths, keep)]))
    ax.xaxis.set_minor_locator(NullLocator())
    lo, hi = float(widths.min()), float(widths.max())
    pad = 2 ** (0.15 * max(math.log2(hi / lo), 1.0))  # keep end markers off the frame
    ax.set_xlim(lo / pad, hi * pad)


def _fit_width_labels(axes: Sequence, widths: np.ndarray) -> None:
    """Width labels that leave a gap between neighbours: every k-th width (always the
    widest) for the smallest k that fits at the tick font size or down to 80% of it."""
    ax = axes[0]
    renderer = ax.figure.canvas.get_renderer()
    full_pt = _font_pt("xtick.labelsize")
    x = ax.transData.transform(np.c_[widths, np.ones(len(widths))])[:, 0]
    labels = [str(int(w)) for w in widths]

    def every(pt: float) -> int:
        font = FontProperties(size=pt)
        half = np.array([renderer.get_text_width_height_descent(t, font, ismath=False)[0] / 2 for t in labels])
        pad = 0.3 * pt / 72 * ax.figure.dpi
        for k in range(1, len(widths)):
            kept = np.arange(len(widths))[::-1][::k][::-1]  # from the widest down
            if (np.diff(x[kept]) >= half[kept][:-1] + half[kept][1:] + pad).all():
                return k
        return max(1, len(widths) - 1)

    sizes = (full_pt, 0.9 * full_pt, 0.8 * full_pt)
    k, pt = min(((every(pt), pt) for pt in sizes), key=lambda kp: (kp[0], -kp[1]))  # fewest dropped, then largest
    for ax in axes:
        _label_widths(ax, widths, every=k)
        ax.tick_params(axis="x", labelsize=pt)


def _fit_titles(axes: Sequence, min_pt: float = 7.0) -> None:
    """Shrink the titles of a row of panels (all alike) until neighbours leave a gap."""
    if len(axes) < 2:
        return
    fig = axes[0].figure
    renderer = fig.canvas.get_renderer()
    titles = [ax.title for ax in axes]
    pt = titles[0].get_fontsize()
    half = [max(renderer.get_text_width_height_descent(line, t.get_fontproperties(), ismath=False)[0]
                for line in t.get_text().split("\n")) / 2 for t in titles]  # the widest line of each
    centres = [(ax.get_position().x0 + ax.get_position().x1) / 2 * fig.get_figwidth() * fig.dpi for ax in axes]
    pad = 2.0 * pt / 72 * fig.dpi  # two characters between titles
    scale = min((c1 - c0 - pad) / (h0 + h1) for c0, c1, h0, h1 in zip(centres, centres[1:], half, half[1:]))
    if scale < 1:
        for title in titles:
            title.set_fontsize(max(min_pt, pt * scale))


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
