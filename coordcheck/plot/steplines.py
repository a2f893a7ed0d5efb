"""Panels of lines against a log2 axis, a line per step: which steps, their styles, the summary over seeds, and the
marks of the values a log axis cannot show.

Stage: figures (analysis side; never imports torch). Input: long tables made by the figure modules: a panel's key
columns, ``step``, the x column (``width``, ``depth`` or ``experts``), ``seed`` and ``value`` (modules pooled first by
:func:`pool`). Output: drawn matplotlib axes — per step a line through the geometric mean over seeds with the seeds'
min-max as a band, in the step's colour (light = early, dark = late, on a palette whose lightness alone tells the
steps apart, so that it survives grayscale and colour blindness) and the step's own marker; zeros as marks in a row at
the axis floor labelled "0", and values that are missing or not finite as marks in a row at the top labelled "n/a",
never left out silently; y ranges that span at least :data:`MIN_Y_SPAN`, so that a flat line never looks like a
trend; and the legend entries that say what the band and the marks are. The guide layout of
:mod:`~coordcheck.plot.coords`, :mod:`~coordcheck.plot.depth` and :mod:`~coordcheck.plot.experts` draw their lines
with these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import matplotlib
import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from coordcheck.plot.helpers import (
    FIGURE_WIDTH, add_legend_below, facet_size, figure_style, fit_log2_labels, fit_titles, font_pt, label_log2,
    label_log_y, seaborn_modules,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["STEP_CMAP", "STEP_CMAP_RANGE", "STEP_MARKERS", "MAX_STEP_LINES", "MIN_Y_SPAN", "ZERO_TICK", "NA_TICK",
           "BAND_ALPHA", "NOT_JUDGED_DASHES", "FAIL_COLOUR", "StepStyle", "YRows", "Panel", "Block", "chosen_steps",
           "step_styles", "pool", "summarise", "draw_steps", "finish_y", "label_y", "step_handles", "reading_handles",
           "draw_blocks", "worst_failing"]

STEP_CMAP = "viridis"  # perceptually uniform, lightness rising monotonically: readable in grayscale and by all eyes
STEP_CMAP_RANGE = (0.78, 0.0)  # early steps light green, late ones dark purple (viridis' last yellows vanish on white)
STEP_MARKERS = ("s", "^", "D", "v", "P", "X", "h", "<", ">", "p")  # steps after 0, in order; step 0: an open ring
MAX_STEP_LINES = 6  # chosen_steps: at most this many (and the steps a caller must show)
MIN_Y_SPAN = 4.0  # a panel's y axis spans at least this factor: a line flat within 2% stays flat to the eye
ZERO_TICK, NA_TICK = "0", "n/a"  # the labels of the rows below and above the log axis
BAND_ALPHA = 0.15
NOT_JUDGED_DASHES = (1, 1.5)  # a step after the window the verdict judged (the loss turned unstable): dotted
_PAD = 0.06  # of the data's log span, above and below it
_ROW = 0.14  # of the data's log span: from the data's edge to a row of marks
_BLOCK_LABEL_IN = {"paper": 0.3, "column": 0.25, "slides": 0.4}  # the right margin that names each block
_YLABEL_IN = {"paper": 0.35, "column": 0.3, "slides": 0.45}  # a y label at the left
_COMPACT_LEGEND = dict(handlelength=1.6, handletextpad=0.4, columnspacing=1.0)  # legends in one row if they can
FAIL_COLOUR = "#d62728"  # the frame and slope of a panel where a module fails (the causes figure's violators' red)
_MIN_LABEL_PT = 6.0
_DODGE = 0.1  # of the x axis' log2 span: between the marks of several steps at one x


@dataclass(frozen=True)
class StepStyle:
    """How one step's line is drawn: its colour, marker and dashes ("" = solid), open (step 0) or filled, and its
    legend label."""

    colour: tuple
    marker: str
    dashes: tuple | str
    open: bool
    label: str

    def line(self) -> dict:
        """Keywords of ``Axes.plot`` for the step's line."""
        kw = dict(color=self.colour, marker=self.marker, linewidth=1.3, markersize=5.0 if self.open else 4.0,
                  markeredgewidth=1.2 if self.open else 0.0, markeredgecolor=self.colour,
                  markerfacecolor="white" if self.open else self.colour)
        if self.dashes:
            kw["dashes"] = self.dashes
        return kw


@dataclass
class YRows:
    """What :func:`finish_y` decided for one panel: the data's range (the round values are chosen in it) and the
    extra ticks of its rows of marks (``{y: "0"}``)."""

    within: tuple[float, float] | None = None
    extra: dict[float, str] = field(default_factory=dict)


def chosen_steps(recorded: Sequence[int], judged_until: int | None = None, include: Sequence[int] = ()) -> list[int]:
    """The steps a line-per-step figure shows by default: 0, 1, 2, 5, 10, 20, 50, ... (each the nearest recorded step)
    up to the last judged step, which is always shown; at most :data:`MAX_STEP_LINES` of them (the first three, the
    last and the others spread between); then the last recorded step when it lies after the judged window
    (``judged_until``: the last step the verdict judged), and every recorded step of ``include`` (the step of the
    verdict's worst series)."""
    recorded = np.unique(np.asarray(recorded, dtype=int))
    judged = recorded[recorded <= judged_until] if judged_until is not None else recorded
    if not len(judged):
        judged = recorded
    last = int(judged[-1])
    ladder = [0] + [m * 10**k for k in range(int(math.log10(max(last, 1))) + 1) for m in (1, 2, 5) if m * 10**k <= last]
    picked = sorted({int(judged[np.abs(judged - t).argmin()]) for t in ladder} | {int(judged[0]), last})
    if len(picked) > MAX_STEP_LINES:  # the first three and the last, the others spread between them
        middle = picked[3:-1]
        idx = np.unique(np.round(np.linspace(0, len(middle) - 1, MAX_STEP_LINES - 4)).astype(int))
        picked = picked[:3] + [middle[i] for i in idx] + [picked[-1]]
    shown = set(picked)
    if len(judged) < len(recorded):
        shown.add(int(recorded[-1]))
    return sorted(shown | ({int(s) for s in include} & set(recorded.tolist())))


def step_styles(steps: Sequence[int], judged_until: int | None = None) -> dict[int, StepStyle]:
    """One :class:`StepStyle` per step, in order: colours evenly spaced on :data:`STEP_CMAP` over
    :data:`STEP_CMAP_RANGE` (light = early), step 0 (initialisation) an open ring on a dashed line, the others each a
    marker of :data:`STEP_MARKERS` on a solid line; a step after ``judged_until`` is dotted and labelled "not
    judged"."""
    cmap = colormaps[STEP_CMAP]
    lo, hi = STEP_CMAP_RANGE
    spots = np.linspace(lo, hi, len(steps)) if len(steps) > 1 else [hi]
    styles, k = {}, 0
    for step, spot in zip(steps, spots):
        step = int(step)
        label = "step 0 (init)" if step == 0 else f"step {step}"
        late = judged_until is not None and step > judged_until
        if late:
            label += " (not judged)"
        if step == 0:
            styles[step] = StepStyle(cmap(spot), "o", (3, 1.5), True, label)
        else:
            styles[step] = StepStyle(cmap(spot), STEP_MARKERS[k % len(STEP_MARKERS)], NOT_JUDGED_DASHES if late else "",
                                     False, label)
            k += 1
    return styles


def _positive_log(values: pd.Series) -> tuple[pd.Series, pd.Series]:
    """(log of the finite positive values, NaN elsewhere; whether each is finite and positive)."""
    v = values.to_numpy(float)
    ok = np.isfinite(v) & (v > 0)
    return pd.Series(np.log(np.where(ok, v, 1.0)), index=values.index).where(ok), pd.Series(ok, index=values.index)


def pool(data: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``value`` per group of ``keys``: the geometric mean of the finite positive values, 0 when every value is 0,
    NaN when none is finite and positive and some is not 0 (a diverged module)."""
    log, ok = _positive_log(data["value"])
    g = data[keys].assign(log=log, ok=ok, zero=data["value"].to_numpy(float) == 0)
    out = g.groupby(keys, observed=True, sort=False).agg(log=("log", "mean"), ok=("ok", "sum"), zero=("zero", "all"))
    value = np.where(out["ok"] > 0, np.exp(out["log"]), np.where(out["zero"], 0.0, np.nan))
    return out.assign(value=value)[["value"]].reset_index()


def summarise(data: pd.DataFrame, keys: list[str], x: str) -> pd.DataFrame:
    """One row per (``keys``, step, ``x``) over the seeds: ``value`` the geometric mean of the finite positive values,
    ``low``/``high`` their min-max, ``seeds`` how many there were, and ``mark``: "" (a value), "zero" (every seed
    exactly 0) or "n/a" (none finite and positive and not all 0). A step drawn at some ``x`` of its panel but not at
    another gets an "n/a" row there too (not recorded); a step recorded nowhere in a panel gets none."""
    by = [*keys, "step", x]
    log, ok = _positive_log(data["value"])
    g = data[by].assign(log=log, ok=ok, zero=data["value"].to_numpy(float) == 0)
    s = g.groupby(by, observed=True).agg(log=("log", "mean"), low=("log", "min"), high=("log", "max"),
                                         seeds=("ok", "sum"), zero=("zero", "all")).reset_index()
    s["mark"] = np.where(s["seeds"] > 0, "", np.where(s["zero"], "zero", "n/a"))
    s = s.assign(value=np.exp(s["log"]), low=np.exp(s["low"]), high=np.exp(s["high"])).drop(columns=["log", "zero"])
    xs = np.sort(data[x].unique())
    full = s[[*keys, "step"]].drop_duplicates().merge(pd.DataFrame({x: xs}), how="cross")
    s = full.merge(s, on=by, how="left")
    s["mark"] = s["mark"].fillna("n/a")
    s["seeds"] = s["seeds"].fillna(0).astype(int)
    return s.sort_values(by, ignore_index=True)


def draw_steps(ax, panel: pd.DataFrame, styles: dict[int, StepStyle], x: str) -> list[tuple[float, int, str]]:
    """Per step of ``styles`` (step 0 first, underneath) with rows in ``panel`` (a :func:`summarise` table of one
    panel): a line through its values, broken where a value is marked, and the seeds' min-max as a band where there
    are several seeds. Returns the marks still to draw once the y range is known: ``(x, step, "zero" | "n/a")``."""
    marks: list[tuple[float, int, str]] = []
    for z, (step, style) in enumerate(styles.items()):
        p = panel[panel["step"] == step].sort_values(x)
        if p.empty:
            continue
        value = p["value"].where(p["mark"] == "")  # NaN breaks the line at a mark
        if value.notna().any():
            ax.plot(p[x].to_numpy(float), value.to_numpy(float), zorder=2 + z, **style.line())
            band = (p["mark"] == "") & (p["seeds"] > 1)
            if band.any():
                ax.fill_between(p[x].to_numpy(float), p["low"].where(band).to_numpy(float),
                                p["high"].where(band).to_numpy(float), color=style.colour, alpha=BAND_ALPHA,
                                linewidth=0, zorder=1)
        marks += [(float(xv), step, m) for xv, m in zip(p[x], p["mark"]) if m]
    return marks


def finish_y(axes: Sequence, marks: dict, styles: dict[int, StepStyle], min_span: float = MIN_Y_SPAN) -> dict:
    """One y range for ``axes`` (panels that share their y axis), log scale: the range of their values and bands,
    widened about its geometric centre to span at least ``min_span`` and padded; below it, when a panel has zeros, a
    row at the floor where they are drawn (the step's marker, open) and labelled "0"; above it, when a panel has a
    value missing or not finite, a row at the top where they are drawn as crosses and labelled "n/a"; a thin rule
    parts each row from the data. ``marks``: ``{ax: [(x, step, mark)]}`` from :func:`draw_steps`. Returns
    ``{ax: YRows}`` for :func:`label_y`, to be called once the layout is final."""
    values = []
    for ax in axes:
        for line in ax.lines:
            y = np.asarray(line.get_ydata(), float)
            values.append(y[np.isfinite(y) & (y > 0)])
        for coll in ax.collections:
            for path in getattr(coll, "get_paths", lambda: [])():
                y = path.vertices[:, 1]
                values.append(y[np.isfinite(y) & (y > 0)])
    values = np.concatenate(values) if values else np.empty(0)
    mine = {ax: marks.get(ax, []) for ax in axes}
    if not len(values):
        lo, hi = 1.0 / math.sqrt(min_span), math.sqrt(min_span)  # marks only: around 1
    else:
        lo, hi = float(values.min()), float(values.max())
    centre, half = (math.log10(lo) + math.log10(hi)) / 2, max(math.log10(hi / lo), math.log10(min_span)) / 2
    lo_l, hi_l = centre - half, centre + half
    span = hi_l - lo_l
    bottom, top = lo_l - _PAD * span, hi_l + _PAD * span
    zero_y = na_y = None
    if any(m == "zero" for ms in mine.values() for _, _, m in ms):
        zero_y = bottom - _ROW * span
        bottom = zero_y - _PAD * span
    if any(m == "n/a" for ms in mine.values() for _, _, m in ms):
        na_y = top + _ROW * span
        top = na_y + _PAD * span
    rows = {}
    for ax in axes:
        ax.set_yscale("log")
        ax.set_ylim(10**bottom, 10**top)
        info = YRows(within=(10 ** (lo_l - _PAD * span), 10 ** (hi_l + _PAD * span)))
        for row_y, kind, tick in ((zero_y, "zero", ZERO_TICK), (na_y, "n/a", NA_TICK)):
            here = [(xv, s) for xv, s, m in mine[ax] if m == kind]
            if row_y is None or not here:
                continue
            y = 10**row_y
            rule = 10 ** ((row_y + (lo_l - _PAD * span if kind == "zero" else hi_l + _PAD * span)) / 2)
            ax.hlines(rule, 0, 1, transform=ax.get_yaxis_transform(), colors="0.75", linewidth=0.6,
                      linestyles=(0, (2, 2)), zorder=1)
            order = {s: i for i, s in enumerate(styles)}
            x0, x1 = ax.get_xlim()
            dodge = _DODGE * math.log2(x1 / x0) if x0 > 0 else 0.0
            for xv, s in here:
                st = styles[s]
                same = sorted({t for xt, t in here if xt == xv}, key=order.get)  # several steps at one x: side by side
                xv = xv * 2 ** (dodge * (same.index(s) - (len(same) - 1) / 2))
                if kind == "zero":
                    ax.scatter([xv], [y], marker=st.marker, s=30, facecolors="white", edgecolors=[st.colour],
                               linewidths=1.2, zorder=6, clip_on=False)
                else:
                    ax.scatter([xv], [y], marker="x", s=28, color=[st.colour], linewidths=1.4, zorder=6,
                               clip_on=False)
            info.extra[y] = tick
        rows[ax] = info
    return rows


def label_y(rows: dict) -> None:
    """Round values on each panel's log y axis, chosen in the data's range, and the "0" / "n/a" ticks of its rows
    of marks (:func:`finish_y`): call once the layout is final (the labels are spaced for the panel's height)."""
    for ax, info in rows.items():
        label_log_y(ax, within=info.within, extra=info.extra)


def step_handles(styles: dict[int, StepStyle], drawn: set[int] | None = None) -> dict:
    """Legend handles of the steps (``drawn``: only these), labelled as :func:`step_styles` labels them."""
    handles = {}
    for step, style in styles.items():
        if drawn is not None and step not in drawn:
            continue
        kw = style.line()
        handles[style.label] = Line2D([], [], **{**kw, "markersize": kw["markersize"] + 0.5})
    return handles


def reading_handles(seeds: int, zero: bool, na: bool, narrow: bool = False) -> dict:
    """Legend handles that say how to read the panels: the band (when there are several seeds), the zeros' row and
    the row of values missing or not finite (when some panel has them); ``narrow``: on two lines each (a legend
    beside the panels)."""
    handles = {}
    if seeds > 1:
        handles[f"band: min–max{chr(10) if narrow else ' '}over {seeds} seeds"] = Patch(facecolor="0.55", alpha=0.35,
                                                                                       linewidth=0)
    if zero:
        handles[f"at {ZERO_TICK}: exactly 0"] = Line2D([], [], color="0.35", marker="o", linestyle="",
                                                     markerfacecolor="white", markeredgewidth=1.2, markersize=5)
    if na:
        handles[f"at {NA_TICK}: missing or not finite"] = Line2D([], [], color="0.35", marker="x", linestyle="",
                                                                 markeredgewidth=1.4, markersize=5)
    return handles


@dataclass
class Panel:
    """One panel of :func:`draw_blocks`: its ``title``, its :func:`summarise` rows, the key of the panels it shares
    its y range with (``share``), the (slope, step) of a failing series it holds (``fails``: framed in red with
    them) and its own y label (``ylabel``; "" = the figure's shared one)."""

    title: str
    rows: pd.DataFrame
    share: object
    fails: tuple[float, int] | None = None
    ylabel: str = ""


@dataclass
class Block:
    """A group of panels (a configuration, a tensor) on lines of their own, named at their right by ``label`` when
    the figure has several; the steps after ``late_after`` (its own judged window) are dotted."""

    panels: list[Panel]
    label: str = ""
    late_after: int | None = None


def draw_blocks(blocks: list[Block], styles: dict[int, StepStyle], *, x: str, xs: np.ndarray, xlabel: str,
                ylabel: str, size: str, max_cols: int, min_height: float, seeds: int, title: str | None = None,
                min_span: float = MIN_Y_SPAN) -> Figure:
    """The figure of a line-per-step coordinate check: each block's panels on lines of at most ``max_cols``, x =
    ``x`` on a log2 axis labelled with ``xs``, y on a log axis spanning at least ``min_span`` (shared by the panels of
    one ``share`` key), zeros and missing values in rows of their own (:func:`finish_y`); ``ylabel`` once at the left
    for every panel without its own, ``xlabel`` under the last line; the blocks named at the right; a legend of the
    steps under the panels, and under it one that says how to read them (the band over ``seeds``, the rows of marks,
    dotted steps, red frames). ``title`` (None: none) above the panels: the verdict belongs in the caption
    (:func:`~coordcheck.plot.helpers.add_caption`)."""
    n_cols = min(max(len(b.panels) for b in blocks), max_cols)
    per_block = [math.ceil(len(b.panels) / n_cols) for b in blocks]
    n_lines = sum(per_block)
    several = len(blocks) > 1 and any(b.label for b in blocks)
    margin_in = _BLOCK_LABEL_IN[size] if several else 0.0
    own_labels = any(p.ylabel for b in blocks for p in b.panels)
    facet_w, facet_h = facet_size(size, n_lines, n_cols,
                                  legend_w=margin_in + _YLABEL_IN.get(size, 0.35) * (2 if own_labels else 1))
    facet_h = max(facet_h, min_height)
    _, plt = seaborn_modules()
    with figure_style(size):
        fig, axes = plt.subplots(n_lines, n_cols, squeeze=False, figsize=(FIGURE_WIDTH[size], facet_h * n_lines))
        marks, groups, bad, lines_of, late_anywhere = {}, {}, {}, [], False
        first = 0
        for block, n in zip(blocks, per_block):
            lines = axes[first:first + n]
            lines_of.append(lines)
            first += n
            late = block.late_after
            mine = {s: replace(st, dashes=NOT_JUDGED_DASHES) if late is not None and s > max(late, 0) else st
                    for s, st in styles.items()}
            late_anywhere |= late is not None and any(s > late for s in styles)
            flat = lines.ravel()
            for panel, ax in zip(block.panels, flat):
                label_log2(ax, xs)
                ax.set_yscale("log")
                marks[ax] = draw_steps(ax, panel.rows, mine, x)
                groups.setdefault(panel.share, []).append(ax)
                ax.set_title(panel.title)
                ax.set_xlabel("")
                ax.set_ylabel(panel.ylabel)
                if not (ax.lines or marks[ax]):
                    ax.text(0.5, 0.5, "no values", transform=ax.transAxes, ha="center", va="center", color="0.4",
                            fontsize="small")
                if panel.fails is not None:
                    bad[ax] = panel.fails
            for ax in flat[len(block.panels):]:
                ax.set_visible(False)
        for j in range(n_cols):  # x named under the lowest visible panel of each column
            column = [ax for ax in axes[:, j] if ax.get_visible()]
            if column:
                column[-1].set_xlabel(xlabel)
        rows = {}
        for group in groups.values():
            rows.update(finish_y(group, marks, styles, min_span))
        for ax, (slope, step) in bad.items():  # where it fails and how: a red frame, the slope and step over it
            for spine in ax.spines.values():
                spine.set_edgecolor(FAIL_COLOUR)
                spine.set_linewidth(1.3)
            ax.annotate(f"slope {slope:+.2f}, step {step}", xy=(0.5, 1.0), xycoords="axes fraction",
                        xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", color=FAIL_COLOUR,
                        fontsize="x-small", fontweight="bold")
        if bad:  # every title over the line of slopes, so that the titles of a line stay level
            for ax in axes.flat:
                ax.set_title(ax.get_title(), pad=4 + 1.3 * font_pt("xtick.labelsize"))
        shared = fig.supylabel(ylabel, fontsize=matplotlib.rcParams["axes.labelsize"]) if ylabel else None
        if title:
            fig.suptitle(title)
        right = 1 - margin_in / FIGURE_WIDTH[size]
        fig.tight_layout(rect=(0, 0, right, 1))
        label_y(rows)
        fig.tight_layout(rect=(0, 0, right, 1))
        shown = [ax for ax in axes.flat if ax.get_visible()]
        if shared is not None:  # centred on the panels, not on the figure
            shared.set_y((min(ax.get_position().y0 for ax in shown) + max(ax.get_position().y1 for ax in shown)) / 2)
        fit_log2_labels(shown, xs)
        for line in axes:
            fit_titles([ax for ax in line if ax.get_visible()])
        if several:  # each block named at its right, as seaborn's margin titles are
            for block, lines in zip(blocks, lines_of):
                vis = [ax for ax in lines.ravel() if ax.get_visible()]
                top = max(ax.get_position().y1 for ax in vis)
                bottom = min(ax.get_position().y0 for ax in vis)
                at = max(ax.get_position().x1 for ax in vis) + 0.12 / FIGURE_WIDTH[size]
                text = fig.text(at, (top + bottom) / 2, block.label, rotation=270, ha="left", va="center",
                                fontsize=matplotlib.rcParams["axes.titlesize"])
                tall = text.get_window_extent(fig.canvas.get_renderer()).height / fig.dpi
                room = (top - bottom) * fig.get_figheight()
                if tall > room:  # a long name shrinks to its block's height
                    text.set_fontsize(max(_MIN_LABEL_PT, text.get_fontsize() * room / tall))
        drawn = {s for b in blocks for p in b.panels for s in p.rows.loc[p.rows["mark"] == "", "step"]}
        drawn |= {s for ms in marks.values() for _, s, _ in ms}
        found = {m for ms in marks.values() for _, _, m in ms}
        reading = reading_handles(seeds, "zero" in found, "n/a" in found)
        if late_anywhere:
            reading["dotted: not judged"] = Line2D([], [], color="0.35", dashes=NOT_JUDGED_DASHES, linewidth=1.3)
        if bad:
            reading["red frame: a module fails here"] = Patch(facecolor="white", edgecolor=FAIL_COLOUR,
                                                              linewidth=1.3)
        add_legend_below(fig, step_handles(styles, drawn), None, **_COMPACT_LEGEND)
        if reading:  # how to read the panels, in a row of its own under the steps
            add_legend_below(fig, reading, None, under_legends=True, **_COMPACT_LEGEND)
    return fig


def worst_failing(failing: pd.DataFrame | None, row: str, level, tensor: str | None, modules, steps: list[int]):
    """(slope, step) of the worst failing series (largest |slope|, at a drawn step when one is) among ``modules`` of
    one panel (of ``tensor`` and the ``level`` of ``row``; None: any), or None. ``failing``: the verdict's failing
    series (``module``, ``tensor``, ``step``, ``slope``, and ``row``'s column when it has it)."""
    if failing is None or failing.empty:
        return None
    f = failing[failing["module"].isin(list(modules))]
    if tensor is not None:
        f = f[f["tensor"] == tensor]
    if level is not None and row in f.columns and row != "tensor":
        f = f[f[row].astype(str) == str(level)]
    f = f[np.isfinite(f["slope"].astype(float))]
    if f.empty:
        return None
    drawn = f[f["step"].isin(steps)]
    f = drawn if len(drawn) else f
    w = f.loc[f["slope"].astype(float).abs().idxmax()]
    return float(w["slope"]), int(w["step"])
