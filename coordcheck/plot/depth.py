"""The depth figures: the coordinate check against depth, and the slopes of a width x depth grid.

Stage: figures (analysis side; never imports torch). Input: a tidy frame (:mod:`coordcheck.core.frame` schema) whose
jobs
set a ``depth`` (a depth sweep at one width, or a width x depth grid). Output: a matplotlib Figure, and, when a path is
given, the same figure as ``<path>.pdf`` and ``<path>.png`` (:func:`~coordcheck.plot.helpers.save_figure`).

A model of depth 16 has modules a model of depth 2 has not, so both figures read the series matched across depths by
:func:`coordcheck.judge.places.match_places` (embeddings, final norm and readout by name; the residual stream = the last
block's output; the modules inside the blocks pooled over blocks). Each place gets a panel kind (:func:`depth_kinds`,
the guide layout's kinds of :func:`~coordcheck.plot.coords.activation_kind` plus three of depth's own), in the order of
:data:`DEPTH_KINDS`:

* ``embedding`` (role ``input``), ``residual stream`` (place kind ``residual``);
* the pooled block modules by the guide layout's rules (:func:`~coordcheck.plot.coords.guide_kinds`): ``attention
  logits``, ``attention output`` and ``MLP output`` (each sub-block's last module: its output projection) in a
  transformer, ``hidden`` otherwise;
* ``final norm`` (a norm outside the blocks, after the residual stream), ``output logits`` (the readout: the output
  module that runs last) and ``loss``.

:func:`plot_depth`: x = depth on a log2 axis, a line per step, a panel per kind (the kind's places pooled by geometric
mean), the seeds averaged in log space with their min-max as a band, as :func:`~coordcheck.plot.coords.plot_coords`'s
guide layout does against width. :func:`plot_grid_slopes`: for a width x depth grid, the slope of log2 stat against
log2 width at each depth beside the slope against log2 depth at each width (:func:`coordcheck.judge.slopes.fit_slopes`),
for
the series a depth verdict judges (:data:`GRID_SERIES`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

from coordcheck.core.frame import conform
from coordcheck.judge.places import match_places
from coordcheck.plot.coords import KINDS, guide_kinds
from coordcheck.plot.helpers import (
    FIGURE_WIDTH, Size, add_caption, check_steps, figure_style, nothing_left, save_figure, seaborn_modules,
)
from coordcheck.plot.steplines import Block, Panel, chosen_steps, draw_blocks, pool, step_styles, summarise
from coordcheck.plot.slopes import SLOPE_CLIP, SLOPE_CMAP
from coordcheck.judge.slopes import CONFIG_COLUMNS, fit_slopes
from coordcheck.judge.verdict import Rules

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.figure import Figure

__all__ = ["plot_depth", "plot_grid_slopes", "depth_kinds", "family_labels", "has_depths", "has_grid", "DEPTH_KINDS",
           "GRID_SERIES", "MAX_DEPTH_COLUMNS"]

RESIDUAL_KIND, FINAL_NORM_KIND, LOSS_KIND = "residual stream", "final norm", "loss"
DEPTH_KINDS = ("embedding", RESIDUAL_KIND, *(k for k in KINDS if k not in ("embedding", "output logits")),
               FINAL_NORM_KIND, "output logits", LOSS_KIND)
# (kind, tensor, step; None = the family's last recorded step): what a depth verdict judges. The residual stream at
# init (GPT-2's init is flat there, CompleteP's shrinks) and its change since step 0 after updates (what separates the
# cases, issue 18), the embeddings' and the final norm's change, the readout's output and change.
GRID_SERIES: tuple[tuple[str, str, int | None], ...] = (
    (RESIDUAL_KIND, "out", 0), (RESIDUAL_KIND, "out", None), (RESIDUAL_KIND, "delta", None),
    ("embedding", "delta", None), (FINAL_NORM_KIND, "delta", None),
    ("output logits", "out", None), ("output logits", "delta", None),
)
MAX_DEPTH_COLUMNS = {"paper": 4, "column": 3, "slides": 8}  # panels per line of plot_depth; more wrap
_MIN_HEIGHT = {"paper": 1.8, "column": 1.4, "slides": 0.0}
_TENSOR_WORDS = {"out": "activations", "delta": "change since step 0"}
_TENSOR_MARK = {"out": "out", "delta": "Δ"}
_LABEL_COLUMNS = [c for c in CONFIG_COLUMNS if c != "config_id"]


def has_depths(frame: pd.DataFrame) -> bool:
    """Whether some family (``family_id``) of ``frame`` holds two depths or more: a depth sweep."""
    sweep = frame[frame["depth"] > 0]
    return bool(len(sweep)) and bool(sweep.groupby("family_id")["depth"].nunique().ge(2).any())


def has_grid(frame: pd.DataFrame) -> bool:
    """Whether some family of ``frame`` holds two depths or more and two widths or more: a width x depth grid."""
    return bool(len(_grid_families(frame)))


def _grid_families(frame: pd.DataFrame) -> list[str]:
    sweep = frame[frame["depth"] > 0]
    counts = sweep.groupby("family_id").agg(depths=("depth", "nunique"), widths=("width", "nunique"))
    return sorted(counts.index[(counts["depths"] >= 2) & (counts["widths"] >= 2)])


def depth_kinds(places: pd.DataFrame) -> pd.Series:
    """The panel kind (:data:`DEPTH_KINDS`, None: not shown) of every row of a places table
    (:func:`coordcheck.judge.places.match_places`), by the rules of the module docstring."""
    kinds = pd.Series(None, index=places.index, dtype=object)
    loss = places["tensor"] == "loss"
    residual = (places["place_kind"] == "residual") & ~loss
    rest = ~loss & ~residual
    as_modules = places.loc[rest, ["config_id", "place", "role", "place_order"]].rename(
        columns={"place": "module", "place_order": "call_order"})
    if len(as_modules):
        kinds[rest] = guide_kinds(as_modules, "config_id")
    stream = places.loc[residual].groupby("config_id")["place_order"].min()
    after = places["place_order"] > places["config_id"].map(stream).fillna(np.inf)
    kinds[rest & (places["role"] == "norm") & (places["place_kind"] == "module") & after] = FINAL_NORM_KIND
    kinds[residual] = RESIDUAL_KIND
    kinds[loss] = LOSS_KIND
    return kinds


def family_labels(frame: pd.DataFrame, facts: Sequence[Mapping] = ()) -> dict[str, str]:
    """``{family_id: label}``: the configuration columns that differ between the families (``parametrization=mup``),
    and their ``depth_scaling`` from the jobs' ``facts`` (job.json or ``CoordCheckResult.facts``, by ``config_id``)
    when known; with nothing differing, the parametrization (and the depth scaling); the family id where labels
    would still collide."""
    families = frame.drop_duplicates("family_id")[["family_id", *_LABEL_COLUMNS]].set_index("family_id")
    family_of = dict(zip(frame["config_id"], frame["family_id"]))
    scaling = {family_of[f["config_id"]]: str(f["depth_scaling"]) for f in facts
               if f.get("depth_scaling") is not None and f.get("config_id") in family_of}
    families["depth_scaling"] = families.index.map(scaling)
    columns = [*_LABEL_COLUMNS, "depth_scaling"]
    varying = [c for c in columns if families[c].nunique(dropna=False) > 1 and families[c].notna().any()]
    if not varying:
        varying = ["parametrization"] + (["depth_scaling"] if families["depth_scaling"].notna().all() else [])
    labels = {fid: ", ".join(f"{c}={row[c]:g}" if c == "lr" else f"{c}={row[c]}" for c in varying
                             if pd.notna(row[c]))
              for fid, row in families.iterrows()}
    seen = pd.Series(labels).value_counts()
    return {fid: f"{label} ({fid})" if seen[label] > 1 else label for fid, label in labels.items()}


def _places(frame: pd.DataFrame) -> pd.DataFrame:
    """The places of the frame's depth sweep (rows with a depth set), with their ``kind``."""
    frame = conform(frame)
    frame = frame[frame["depth"] > 0]
    if not has_depths(frame):
        raise ValueError("not a depth sweep: no family (the configuration minus width and depth) holds two depths; "
                         "run depth=2,4,8 --multirun or coord_check(..., depths=[...])")
    places = match_places(frame)
    return places.assign(kind=depth_kinds(places))


def plot_depth(
    frame: pd.DataFrame,
    path: str | Path | None = None,
    *,
    stat: str = "std",
    tensor: str | Sequence[str] = ("out", "delta"),
    steps: Sequence[int] | None = None,
    width: int | None = None,
    labels: Mapping[str, str] | None = None,
    title: str | None = None,
    size: Size = "paper",
    max_cols: int | None = None,
    window_end: int | None = None,
    include_steps: Sequence[int] = (),
    caption: str | None = None,
) -> Figure:
    """The coordinate check against depth: ``stat`` of each kind of activation against depth, a line per step.

    One block of panels per (family, width) with two depths or more (families: ``family_id``, the configuration minus
    width and depth; ``width`` keeps one width of a grid) and per ``tensor`` (default ``out`` and ``delta``, one under
    the other: a depth verdict judges the residual stream's output at init and its change since step 0 after
    updates; ``"out"``: the output alone), each block named at its right; a panel per kind (:data:`DEPTH_KINDS`, each
    only where present; ``loss`` in the first tensor's block, with its own y label), wrapped onto lines of
    ``max_cols`` panels (default :data:`MAX_DEPTH_COLUMNS`). In every panel x is depth on a log2 axis labelled with
    the depths present and y is the kind's geometric mean over its places on a log axis, averaged over seeds in log
    space with the seed min-max as a band, spanning at least a factor
    :data:`~coordcheck.plot.steplines.MIN_Y_SPAN`; panels of one kind and tensor share their y axis, so the
    families compare directly. Depth-invariant (what depth-μP and CompleteP promise for the residual stream) is
    flat; a line that rises with depth is a depth blow-up. Zeros are drawn in a row at the floor labelled "0", values
    missing or not finite in a row at the top labelled "n/a" (:mod:`~coordcheck.plot.steplines`).

    ``steps`` (default :func:`~coordcheck.plot.steplines.chosen_steps`: 0, 1, 2, 5, ... and the last judged step
    (``window_end``), the last recorded one when it lies after it, dotted, and ``include_steps``) are drawn light
    (early) to dark (late), each with its own marker. ``labels`` maps a family_id to the name its blocks get (default
    :func:`family_labels` of the frame); ``title`` becomes the suptitle (None: with one family, its label and width)
    and ``caption`` (the verdict) the text under the figure (:func:`~coordcheck.plot.helpers.add_caption`). Raises
    ValueError on a frame that is not a depth sweep.
    """
    places = _places(frame)
    tensors = [tensor] if isinstance(tensor, str) else list(dict.fromkeys(tensor))
    if width is not None:
        if int(width) not in set(places["width"]):
            raise ValueError(f"width={width} not in the sweep; widths: {sorted(set(places['width']))}")
        places = places[places["width"] == int(width)]
    depths_per = places.groupby(["family_id", "width"])["depth"].nunique()
    groups = [g for g in depths_per.index[depths_per >= 2]]
    acts = places[places["kind"].notna() & (places["stat"] == stat) & places["tensor"].isin(tensors)]
    if acts.empty:
        raise ValueError(nothing_left(places.rename(columns={"place": "module"}), stat=stat, tensor=", ".join(tensors)))
    loss = places[places["kind"] == LOSS_KIND]
    data = pd.concat([acts, loss], ignore_index=True)
    data = data[data.set_index(["family_id", "width"]).index.isin(groups)]
    data = data.assign(value=data["value"].abs())  # |mean| for stat="mean"; every other stat is >= 0

    recorded = np.sort(acts["step"].unique())
    if steps is None:
        steps = chosen_steps(recorded, window_end, include_steps)
    else:
        steps = check_steps(steps, recorded)
        window_end = None
    data = data[data["step"].isin(steps)]
    keys = ["family_id", "width", "kind", "tensor"]
    summary = summarise(pool(data, [*keys, "depth", "seed", "step"]), keys, "depth")  # places pooled, then seeds

    names = {**family_labels(frame), **(labels or {})}
    several = len({fam for fam, _ in groups}) > 1
    widths_shown = len({w for _, w in groups}) > 1
    magnitude = "|mean|" if stat == "mean" else stat
    blocks = []
    for fam, w in sorted(groups, key=lambda g: (names.get(g[0], g[0]), g[1])):
        here = summary[(summary["family_id"] == fam) & (summary["width"] == w)]
        for k, ten in enumerate(tensors):
            kinds = [kd for kd in DEPTH_KINDS if kd != LOSS_KIND and kd in set(here.loc[here["tensor"] == ten, "kind"])]
            panels = [Panel(kd, here[(here["kind"] == kd) & (here["tensor"] == ten)], (kd, ten)) for kd in kinds]
            if k == 0 and LOSS_KIND in set(here["kind"]):
                panels.append(Panel(LOSS_KIND, here[here["kind"] == LOSS_KIND], (LOSS_KIND,), ylabel="loss"))
            if panels:
                parts = ([names.get(fam, fam)] if several else []) + ([f"width {w}"] if widths_shown else [])
                parts += [_TENSOR_WORDS.get(ten, ten)] if len(tensors) > 1 else []
                blocks.append(Block(panels, " · ".join(parts)))
    one = f"{magnitude} of {_TENSOR_WORDS.get(tensors[0], tensors[0])}" if len(tensors) == 1 else magnitude
    if title is None:  # what every block shares, named above the panels (the verdict is the caption's)
        fam, w = groups[0]
        title = ", ".join(([] if several else [names.get(fam, fam)]) + ([] if widths_shown else [f"width {w}"])) or None
    return _save(draw_blocks(blocks, step_styles(steps, window_end), x="depth", xs=np.sort(summary["depth"].unique()),
                             xlabel="depth", ylabel=f"{one} (log scale)", size=size,
                             max_cols=max_cols or MAX_DEPTH_COLUMNS[size], min_height=_MIN_HEIGHT[size],
                             seeds=int(data["seed"].nunique()), title=title), path, caption, size)


def _save(fig: Figure, path: str | Path | None, caption: str | None, size: Size) -> Figure:
    add_caption(fig, caption, size)
    save_figure(fig, path)
    return fig


def plot_grid_slopes(
    frame: pd.DataFrame,
    path: str | Path | None = None,
    *,
    series: Sequence[tuple[str, str, int | None]] = GRID_SERIES,
    stat: str = "std",
    band: tuple[float, float] | None = None,
    labels: Mapping[str, str] | None = None,
    title: str | None = None,
    size: Size = "paper",
    caption: str | None = None,
) -> Figure:
    """A width x depth grid at a glance: the width slope at each depth beside the depth slope at each width.

    Per family with two widths and two depths or more, a pair of heatmaps: left, the slope of log2 ``stat`` against
    log2 width (rows: depths; each depth is its own configuration); right, the slope against log2 depth (rows:
    widths). Both are :func:`coordcheck.judge.slopes.fit_slopes` over the places of
    :func:`coordcheck.judge.places.match_places`
    (``axis="width"`` with keys family_id, depth, place, tensor, stat, step; ``axis="depth"`` with keys family_id,
    width, place, tensor, stat, step). Columns are the places of each ``series`` entry ``(kind, tensor, step)``
    (kind: :data:`DEPTH_KINDS`; step None: the family's last recorded step; every place of the kind gets its own
    column, ``wte`` and ``wpe`` for the embeddings), labelled ``place tensor @ step``; the default,
    :data:`GRID_SERIES`, is what a depth verdict judges. Colour: the slope on a diverging palette centred at 0,
    clipped at ±:data:`~coordcheck.plot.slopes.SLOPE_CLIP`; every cell prints its slope. ``band`` (default the
    verdict's flat band ``(-Rules().shrink_tol, Rules().tol)``) is marked on the colour bar; a cell whose slope lies
    outside it prints in bold, and one whose whole 95% interval lies outside it is boxed. ``title`` becomes the
    suptitle, ``caption`` (the verdict) the text under the figure. Raises ValueError when no family is a grid.
    """
    places = _places(frame)
    fams = _grid_families(places)
    if not fams:
        raise ValueError("not a width x depth grid: no family holds two widths and two depths "
                         "(width=64,128 depth=2,4,8 --multirun)")
    places = places[places["family_id"].isin(fams) & (places["stat"] == stat)]
    if places.empty:
        raise ValueError(f"no rows with stat={stat!r} in the grid")
    lo, hi = band if band is not None else (-Rules().shrink_tol, Rules().tol)
    kind_of = places.drop_duplicates(["config_id", "place"]).set_index(["family_id", "place"])["kind"]
    kind_of = kind_of[~kind_of.index.duplicated()]
    by = ["place", "tensor", "stat", "step"]
    table = places.drop(columns="place_order")
    across = {"width": fit_slopes(table, axis="width", keys=["family_id", "depth", *by]),
              "depth": fit_slopes(table, axis="depth", keys=["family_id", "width", *by])}
    names = {**family_labels(frame), **(labels or {})}

    sns, plt = seaborn_modules()
    panels = []  # (family, axis, heatmap of slopes, intervals, column labels)
    for fam in sorted(fams, key=lambda f: names.get(f, f)):
        last = places.loc[places["family_id"] == fam].groupby("tensor")["step"].max()
        columns = []  # (place, tensor, step, label)
        for kind, ten, step in series:
            if ten not in last:
                continue
            at = int(last[ten]) if step is None else int(step)
            kinds = kind_of.loc[fam] if fam in kind_of.index.get_level_values(0) else pd.Series(dtype=object)
            for place in [p for p, k in kinds.items() if k == kind]:
                label = "residual" if kind == RESIDUAL_KIND else place
                columns.append((place, ten, at, f"{label} {_TENSOR_MARK.get(ten, ten)} @ {at}"))
        if not columns:
            raise ValueError(f"none of the series {list(series)} is in the grid (stat={stat!r})")
        for axis, rows in (("width", "depth"), ("depth", "width")):
            s = across[axis]
            s = s[s["family_id"] == fam].set_index(["place", "tensor", "step", rows])
            index = sorted(places.loc[places["family_id"] == fam, rows].unique())
            cells = {c[3]: [s["slope"].get((c[0], c[1], c[2], r), np.nan) for r in index] for c in columns}
            low = {c[3]: [s["ci_low"].get((c[0], c[1], c[2], r), np.nan) for r in index] for c in columns}
            high = {c[3]: [s["ci_high"].get((c[0], c[1], c[2], r), np.nan) for r in index] for c in columns}
            panels.append((fam, axis, rows, pd.DataFrame(cells, index=index), pd.DataFrame(low, index=index),
                           pd.DataFrame(high, index=index)))

    n_rows = len(fams)
    n_series = max(p[3].shape[1] for p in panels)
    n_levels = max(p[3].shape[0] for p in panels)
    width = FIGURE_WIDTH[size]
    height = min(9.0, n_rows * (1.4 + 0.28 * n_levels) + 1.0 + 0.08 * max(len(c) for p in panels for c in p[3]))
    with figure_style(size, grid=False):
        fig, axes = plt.subplots(n_rows, 2, figsize=(width, height), squeeze=False, layout="constrained")
        annot_pt = min(8.0, 72 * (width - 2.4) / 2 / max(n_series, 1) / 3.3)  # '+0.05' fits its cell
        for (fam, axis, rows, grid, low, high), ax in zip(panels, axes.flat):
            text = grid.map(lambda v: "" if not np.isfinite(v) else f"{v + 0.0:+.2f}")
            sns.heatmap(grid, ax=ax, cmap=SLOPE_CMAP, center=0, vmin=-SLOPE_CLIP, vmax=SLOPE_CLIP, cbar=False,
                        annot=text.to_numpy(), fmt="", annot_kws={"fontsize": annot_pt},
                        linewidths=0.5, linecolor="white")
            outside = (grid < lo) | (grid > hi)
            significant = (low > hi) | (high < lo)
            for t, (i, j) in zip(ax.texts, np.ndindex(grid.shape)):
                if outside.iat[i, j]:
                    t.set_fontweight("bold")
            for i, j in zip(*np.nonzero(significant.to_numpy())):
                ax.add_patch(Rectangle((j + 0.04, i + 0.04), 0.92, 0.92, fill=False, edgecolor="black",
                                       linewidth=1.2))
            other = "depth" if axis == "width" else "width"
            ax.set_title(f"{names.get(fam, fam)}\nslope vs log2 {axis}, per {other}" if n_rows > 1 or labels
                         else f"slope vs log2 {axis}, per {other}", fontsize="medium")
            ax.set_ylabel(rows)
            ax.set_xlabel("")
            ax.set_xticklabels(grid.columns, rotation=40, ha="right", rotation_mode="anchor", fontsize="small")
            ax.tick_params(axis="y", rotation=0)
        bar = fig.colorbar(axes.flat[0].collections[0], ax=axes, extend="both", shrink=0.8, aspect=30,
                           label=f"slope of log2 {stat}\n(colour clipped at ±{SLOPE_CLIP:g})")
        for edge in (lo, hi):
            bar.ax.axhline(edge, color="black", linewidth=1.0)
        fig.supxlabel(f"band [{lo:+.2f}, {hi:+.2f}] marked on the colour bar; bold: slope outside it; "
                      f"boxed: whole 95% interval outside it", fontsize="small")
        fig.suptitle(title or f"width x depth grid: slopes of log2 {stat}", fontweight="bold")
    return _save(fig, path, caption, size)
