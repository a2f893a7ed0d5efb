"""The coordinate-check figure: an activation statistic against width, in the guide (default) or the grid layout.

Stage: figures (analysis side; never imports torch). Input: a tidy frame in the schema
of :mod:`coordcheck.core.frame` (one row per measurement). Output: a matplotlib Figure, and,
when a path is given, the same figure as ``<path>.pdf`` and ``<path>.png``
(:func:`~coordcheck.plot.helpers.save_figure`).
Seed spread is drawn as a min-max band (``errorbar=("pi", 100)``), never bootstrapped,
so that sweeps of tens of thousands of rows plot in about a second.

:func:`plot_coords` has two layouts. ``"guide"`` (the default), the layout of published muP guides and papers:
one panel per kind of activation, one line per step (initialisation in open rings, dashed), the step legend in a row
below the panels. ``"grid"``: one panel per step, one line per module (colour = layer index, marker and dashes =
role, the ``highlight`` modules thick, each with a marker and dashes of its own, and in a legend of their own). Both
label every width on their log2 axis (as powers of two when the numbers as written do not fit). The kind of a module
(:func:`activation_kind`):

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
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.legend import Legend

from coordcheck.core.frame import conform
from coordcheck.plot.helpers import (
    Size, add_caption, add_legend, add_legend_below, check_one_config, check_steps, default_steps,
    facet_size, figure_style, fit_log2_labels, fit_titles, label_log2, label_log_y, legend_line,
    module_order, nothing_left, save_figure, seaborn_modules, tensor_rank,
)
from coordcheck.plot.steplines import (
    FAIL_COLOUR, Block, Panel, chosen_steps, draw_blocks, pool, reading_handles, step_styles, summarise, worst_failing,
)

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.figure import Figure

__all__ = ["plot_coords", "activation_kind", "guide_kinds", "highlight_style", "Layout", "KINDS", "ROLE_STYLE",
           "HIGHLIGHT_COLOURS", "HIGHLIGHT_WIDTH", "HIGHLIGHT_MARKS", "HIGHLIGHT_LAYERS", "NOT_JUDGED_FACE",
           "LAYER_CMAP", "LAYER_CMAP_RANGE", "MAX_COLUMNS", "MAX_MODULE_LEGEND", "MAX_LAYER_LEGEND",
           "MAX_GUIDE_COLUMNS", "FAIL_COLOUR"]

Layout = Literal["guide", "grid"]  # the first is the default (coordcheck.report.knobs.LAYOUTS)

LAYER_CMAP = "viridis"
LAYER_CMAP_RANGE = (0.0, 0.85)  # viridis' last yellows vanish on white
MAX_COLUMNS = 4  # default number of step columns in plot_coords
MAX_MODULE_LEGEND = 8  # more modules than this: legend by layer index
MAX_LAYER_LEGEND = 9  # more layer indices than this: show an evenly spaced subset

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
# each highlighted module its own open marker and dashes, so that two with the same values (a router softmax in two
# layers) both show: the first drawn is the widest, underneath, the next ones narrower and dashed on top of it
HIGHLIGHT_MARKS = (("o", ""), ("s", (4, 1.5)), ("D", (1.5, 1.5)), ("^", (6, 1.5, 1.5, 1.5)), ("v", (3, 3)),
                   ("P", (1, 2.5)))
HIGHLIGHT_LAYERS = 1.6  # how much wider (line, in points) and larger (marker) the first is than the last
NOT_JUDGED_FACE = "0.93"  # panels of steps after the judged window (the loss turned unstable)

# layout="guide": panels in this order (see activation_kind), one line per step
KINDS = ("embedding", "attention logits", "attention output", "MLP output", "hidden", "output logits")
_ROLE_KIND = {"input": "embedding", "attention": "attention logits", "output": "output logits"}
_ATTENTION_PARTS = frozenset({"attn", "attention", "self_attn"})
_MLP_PARTS = frozenset({"mlp", "ffn", "feed_forward", "fc", "w1", "w2", "w3"})
MAX_GUIDE_COLUMNS = {"paper": 6, "column": 2, "slides": 6}  # panels per line; more kinds wrap onto the next line
_GUIDE_MIN_HEIGHT = {"paper": 2.0, "column": 1.4, "slides": 0.0}  # narrow panels on a page still get a y scale
_TENSOR_WORDS = {"out": "activations", "delta": "change since step 0"}


def plot_coords(
    frame: pd.DataFrame,
    path: str | Path | None = None,
    *,
    stat: str = "std",
    tensor: str | Sequence[str] = "out",
    steps: Sequence[int] | None = None,
    row: str = "parametrization",
    size: Size = "paper",
    layout: Layout = "guide",
    title: str | None = None,
    highlight: Sequence[str] = (),
    include_steps: Sequence[int] = (),
    window_end: dict | None = None,
    caption: str | None = None,
    failing: pd.DataFrame | None = None,
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

    ``layout="guide"`` (the default), as in published muP guides: columns are kinds of activation
    (:func:`activation_kind`), in the order embedding, attention logits, attention
    output, MLP output (or hidden), output logits, each only when present; one line per
    step (default: every recorded step, at most 11 spread evenly) from light (early) to
    dark (late), step 0 (initialisation) in open rings and dashed underneath the others, so that a
    step 1 equal to it leaves it visible; the step legend in a row below the panels. Within a kind, the modules are
    combined by the geometric mean of ``value`` for each (width, seed, step), then the seeds are averaged
    in log space as in the grid. ``highlight`` does not apply.

    ``layout="grid"``: columns are ``steps`` (default: up to four steps spread over the
    judged ones, always the first and the last, see below), one line per module, coloured by
    ``layer_index`` (dark = shallow), with the marker and dash pattern of its ``role``
    (:data:`ROLE_STYLE`: input squares, hidden circles, attention triangles dashed, norm
    diamonds dotted, output stars dash-dotted). The modules named in ``highlight`` (e.g.
    the verdict's worst offenders; names not in the frame are ignored) are drawn thick,
    on top, in colours of their own, each with an open marker and a dash pattern of its own
    (:func:`highlight_style`: the first widest and underneath, so that two with the same values
    both show), and listed in a legend below the panels; the other lines are then faded.

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
    if layout not in get_args(Layout):
        raise ValueError(f"layout must be 'guide' or 'grid', got {layout!r}")
    frame = conform(frame)
    frame = frame[frame["tensor"] != "loss"]
    _check_column(frame, row, "row")
    tensors = [tensor] if isinstance(tensor, str) else list(dict.fromkeys(tensor))
    data = frame[frame["stat"] == stat]
    if row != "tensor":
        data = data[data["tensor"].isin(tensors)]
    if data.empty:
        raise ValueError(nothing_left(frame, stat=stat, tensor=None if row == "tensor" else ", ".join(tensors)))
    check_one_config(data, by=[row], what=f"row={row!r}")

    recorded = np.sort(data["step"].unique())
    judged_until = max(window_end.values()) if window_end else None
    if steps is None:
        steps = (default_steps(recorded, MAX_COLUMNS, judged_until, include_steps) if layout == "grid"
                 else chosen_steps(recorded, judged_until, include_steps))
    else:
        steps = check_steps(steps, recorded)
        judged_until, window_end = None, None  # steps chosen by hand: titled as they are
    data = data[data["step"].isin(steps)]
    levels = sorted(data[row].unique(), key=tensor_rank if row == "tensor" else None)
    data = data.assign(value=data["value"].abs()) if stat == "mean" else data
    magnitude = "|mean|" if stat == "mean" else stat
    ordered = sorted(tensors, key=tensor_rank)
    panel_rows = ([(level, level) for level in levels] if row == "tensor"  # (level of row, tensor) per row of panels
                  else [(level, t) for level in levels for t in ordered
                        if ((data[row] == level) & (data["tensor"] == t)).any()])
    if layout == "guide":
        fig = _coord_guide(data, steps=list(steps), row=row, panel_rows=panel_rows, size=size, magnitude=magnitude,
                           title=title, window_end=window_end, failing=failing)
    else:
        if row == "tensor" or len(tensors) == 1:
            row_order = levels
            ylabels = [f"{magnitude} of {level if row == 'tensor' else tensors[0]}" for level in levels]
        else:  # a row per (level, tensor): the tensors of one level next to each other
            row, panels = _PANEL_ROW, data[row].astype(str) + " · " + data["tensor"]
            data = data.assign(**{row: panels})
            row_order = [f"{level} · {t}" for level, t in panel_rows]
            ylabels = [f"{magnitude} of {t}" for _, t in panel_rows]
            levels = [level for level, _ in panel_rows]
        if row != "tensor" and len(set(levels)) > 1:
            ylabels = [f"{level}\n{label}" for level, label in zip(levels, ylabels)]
        fig = _coord_grid(data, steps=list(steps), row=row, row_order=row_order, size=size, ylabels=ylabels,
                          highlight=list(highlight), title=title, judged_until=judged_until, failing=failing)
    add_caption(fig, caption, size)
    save_figure(fig, path)
    return fig


_PANEL_ROW = "(panel)"  # the row of panels when it holds one level of ``row`` and one tensor


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
                ylabels: list[str], highlight: list[str], title: str | None, judged_until: int | None,
                failing: pd.DataFrame | None = None) -> Figure:
    """Panels (row level, step); one line per module: colour = layer index, style = role; the steps after
    ``judged_until`` titled "not judged"; a highlighted module with a series in ``failing`` named with its worst
    slope."""
    widths = np.sort(data["width"].unique())
    modules = module_order(data)
    modules["role"] = modules["module"].map(data.drop_duplicates("module").set_index("module")["role"])
    picked = [m for m in dict.fromkeys(highlight) if m in set(modules["module"])]
    positive = np.isfinite(data["value"]) & (data["value"] > 0)  # what a log axis can show
    data = data.loc[positive, list(dict.fromkeys([row, "step", "module", "role", "width", "seed", "value"]))]
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
    facet_h = max(facet_h, _GUIDE_MIN_HEIGHT[size])  # a panel tall enough for a scale beside its legends
    with figure_style(size):
        g = _log_width_facets(data, widths, row=row, row_order=row_order, col="step", col_order=steps, sharey="row",
                              facet=(facet_w, facet_h))
        rest = [m for m in modules["module"] if m not in hot]
        g.map_dataframe(
            _lineplot_subset, keep=rest, **common, hue="module", hue_order=rest, palette=palette,
            err_kws={"alpha": 0.08 if many else 0.15, "linewidth": 0}, linewidth=line_w,
            markersize=marker_s, alpha=0.45 if hot else 1.0,  # faded behind the highlighted modules
        )
        for k, m in enumerate(picked):  # thick and on top, each over the one before it (highlight_style)
            line, mark = highlight_style(k, len(picked))
            g.map_dataframe(
                _lineplot_subset, keep=[m], **{**common, "style": "module", "style_order": [m], "markers": {m: mark[0]},
                                               "dashes": {m: mark[1]}, "markeredgewidth": 1.4},
                hue="module", hue_order=[m], palette=hot, markerfacecolor="none", markeredgecolor=hot[m],
                err_kws={"alpha": 0.2, "linewidth": 0}, **line, zorder=3 + k,
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
        seeds = int(data["seed"].nunique()) if "seed" in data else 1
        legends = [add_legend(g.figure, handles, legend_title)]
        if seeds > 1:  # what the shaded bands are
            legends.append(add_legend(g.figure, reading_handles(seeds, False, False, narrow=True), ""))
        if many and len(role_order) > 1:  # the module legend above shows each module's style
            roles = {r: legend_line("0.35", markers[r], dashes[r]) for r in role_order}
            legends.append(add_legend(g.figure, roles, "role"))
        _stack_legends(g.figure, legends)
        if hot:
            order = dict(zip(modules["module"], modules["layer_index"]))
            slopes = {m: worst_failing(failing, "tensor", None, None, [m], steps) for m in picked}
            handles = {f"L{order[m]} {m}" + (f" (slope {slopes[m][0]:+.2f}, step {slopes[m][1]})" if slopes[m]
                                             else ""):
                       legend_line(hot[m], *highlight_style(k, len(picked))[1], linewidth=HIGHLIGHT_WIDTH)
                       for k, m in enumerate(picked)}
            for handle in handles.values():  # open markers, as drawn
                handle.set_markerfacecolor("none")
                handle.set_markeredgewidth(1.4)
            add_legend_below(g.figure, handles, "highlighted modules")
    return g.figure


def highlight_style(k: int, n: int) -> tuple[dict, tuple]:
    """The ``k``-th of ``n`` highlighted modules, in drawing order: (``linewidth`` and ``markersize``, (marker,
    dashes)). Line widths go from ``HIGHLIGHT_WIDTH + HIGHLIGHT_LAYERS`` down to ``HIGHLIGHT_WIDTH`` and markers
    shrink alike, so a later line drawn over an earlier one with the same values leaves the earlier one's edges,
    gaps and marker showing."""
    wider = HIGHLIGHT_LAYERS * (n - 1 - k) / (n - 1) if n > 1 else 0.0
    return ({"linewidth": HIGHLIGHT_WIDTH + wider, "markersize": 5.0 + 2 * wider},
            HIGHLIGHT_MARKS[k % len(HIGHLIGHT_MARKS)])


def _log_width_facets(data: pd.DataFrame, widths: np.ndarray, *, row: str, row_order: list, col: str,
                      col_order: list, sharey: str, facet: tuple[float, float]):
    """A FacetGrid whose panels have width on a log2 axis (labelled with ``widths``) and a log y axis."""
    sns, _ = seaborn_modules()
    facet_w, facet_h = facet
    g = sns.FacetGrid(data, row=row, row_order=row_order, col=col, col_order=col_order, sharey=sharey,
                      margin_titles=True, height=facet_h, aspect=facet_w / facet_h)
    for ax in g.axes.flat:  # scales before plotting: seaborn then averages seeds in log space
        label_log2(ax, widths)
        ax.set_yscale("log")
    return g


def _lineplot_subset(*args, keep: list, data: pd.DataFrame, column: str = "module", **kwargs) -> None:
    """``sns.lineplot`` on the rows of ``data`` whose ``column`` is in ``keep``."""
    sns, _ = seaborn_modules()
    subset = data[data[column].isin(keep)]
    if not subset.empty:
        sns.lineplot(*args, data=subset, **kwargs)


def _coord_guide(data: pd.DataFrame, *, steps: list[int], row: str, panel_rows: list[tuple], size: Size,
                 magnitude: str, title: str | None, window_end: dict | None,
                 failing: pd.DataFrame | None) -> Figure:
    """A block of panels per (level of ``row``, tensor), a panel per kind of activation (wrapped onto lines of
    :data:`MAX_GUIDE_COLUMNS`), one line per step (:func:`~coordcheck.plot.steplines.draw_blocks`), modules pooled by
    geometric mean; the panels where ``failing`` has a series, framed in red with its slope. The steps after a
    level's ``window_end`` are dotted (and named "not judged" in the legend when every level's window ends there)."""
    widths = np.sort(data["width"].unique())
    data = data.assign(kind=guide_kinds(data, row))
    data = data[data["kind"].notna()]
    if data.empty:
        raise ValueError("no module has a kind of activation that layout='guide' shows "
                         "(roles input, attention, hidden, output): use layout='grid'")
    kinds = [k for k in KINDS if k in set(data["kind"])]
    keys = list(dict.fromkeys([row, "tensor", "kind"]))
    members = data.groupby(keys, observed=True)["module"].unique()  # the modules each panel pools
    pooled = pool(data, [*keys, "step", "width", "seed"])  # geometric mean over the kind's modules
    summary = summarise(pooled, keys, "width")
    ends = {level: int(end) for level, end in (window_end or {}).items()}
    shared_end = next(iter(set(ends.values()))) if len(set(ends.values())) == 1 and (
        {lv for lv, _ in panel_rows} <= set(ends)) else None
    one_tensor = len({t for _, t in panel_rows}) == 1
    blocks = []
    for level, tensor in panel_rows:
        panels = []
        for kind in kinds:
            key = (level, kind) if row == "tensor" else (level, tensor, kind)
            sel = summary[(summary[row] == level) & (summary["kind"] == kind)]
            if row != "tensor":
                sel = sel[sel["tensor"] == tensor]
            panels.append(Panel(kind, sel, (kind, tensor),
                                worst_failing(failing, row, level, tensor, members.get(key, ()), steps)))
        name = str(level) if one_tensor or row == "tensor" else f"{level} · {_TENSOR_WORDS.get(tensor, tensor)}"
        blocks.append(Block(panels, name, ends.get(level) if shared_end is None else None))
    what = f"{magnitude} of {_TENSOR_WORDS.get(panel_rows[0][1], panel_rows[0][1])}" if one_tensor else magnitude
    return draw_blocks(blocks, step_styles(steps, shared_end), x="width", xs=widths, xlabel="width",
                       ylabel=f"{what} (log scale)", size=size, max_cols=MAX_GUIDE_COLUMNS[size],
                       min_height=_GUIDE_MIN_HEIGHT[size], seeds=int(data["seed"].nunique()), title=title)


def guide_kinds(data: pd.DataFrame, row: str) -> pd.Series:
    """:func:`activation_kind` of every row of ``data`` (columns ``module``, ``role``, ``call_order`` and ``row``;
    None: not shown), with the rules that need the whole
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
        label_log_y(ax)
    g.tight_layout()
    fit_log2_labels(g.axes.flat, widths)
    fit_titles(g.axes[0])


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


def _check_column(df: pd.DataFrame, column: str, arg: str) -> None:
    if column not in df.columns:
        raise ValueError(f"{arg}={column!r} is not a column; columns: {list(df.columns)}")
