"""Shared helpers of the figures: page sizes, the seaborn theme, legends, input checks and saving.

Stage: figures (analysis side; never imports torch). Input: none (helpers called by the figure modules
:mod:`~coordcheck.plot.coords`, :mod:`~coordcheck.plot.slopes`, :mod:`~coordcheck.plot.loss`,
:mod:`~coordcheck.plot.causes` and the figures of :mod:`coordcheck.transfer` and :mod:`coordcheck.gradflow`).
Output: the constants every figure shares (:data:`FIGURE_WIDTH`, :data:`PNG_DPI`, ...), a scoped theme, facet
sizes, legend handles, one-line errors for tables that cannot be drawn, the default steps of a figure
(:func:`default_steps`), log axes labelled with round numbers (:func:`label_log_y`) or the widths / depths present
(:func:`label_log2`, :func:`fit_log2_labels`), titles that never touch (:func:`fit_titles`), a caption under the
figure (:func:`add_caption`), and :func:`save_figure`, which writes ``<path>.pdf`` (vector, every font embedded as
TrueType) and ``<path>.png`` atomically next to each other, the caption in both files' metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

import math

import matplotlib
import numpy as np
import pandas as pd
from matplotlib import rcsetup
from matplotlib.font_manager import FontProperties
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedFormatter, FixedLocator, MaxNLocator, NullLocator

from coordcheck.core.frame import FrameError, atomic_write
from coordcheck.judge.slopes import CONFIG_COLUMNS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Size", "SIZES", "FIGURE_WIDTH", "SLIDE_HEIGHT", "WIDTH_PALETTE", "PNG_DPI", "CAPTION_GID",
           "seaborn_modules", "figure_style", "facet_size", "module_order", "legend_line", "add_legend",
           "add_legend_below", "font_pt", "tensor_rank", "check_columns", "check_one_config", "nothing_left",
           "save_figure", "add_caption", "caption_of", "default_steps", "pick_steps", "check_steps", "label_log_y",
           "plain_number", "label_log2", "log2_labels", "powers_of_two", "fit_log2_labels", "fit_titles"]

Size = Literal["paper", "column", "slides"]
SIZES: tuple[str, ...] = get_args(Size)  # coordcheck.report.knobs.SIZES repeats them (it must not import matplotlib)

# Total figure widths in inches, and the seaborn plotting context used at that size.
# "paper": the text width of a page (~7 in): a single-column paper's text, or both columns of a two-column paper
# (figure*); "column": one column of a two-column paper (3.4 in); "slides" fills a 16:9 slide (12 x 6.75 in).
FIGURE_WIDTH = {"paper": 7.0, "column": 3.4, "slides": 12.0}
SLIDE_HEIGHT = 6.75
_CONTEXT = {"paper": ("paper", 1.0), "column": ("paper", 0.85), "slides": ("notebook", 1.15)}
_LEGEND_W = {"paper": 1.3, "column": 0.9, "slides": 2.0}  # room kept for the legend on the right
CAPTION_GID = "coordcheck-caption"  # the gid of the caption's Text (add_caption); save_figure copies it to metadata

WIDTH_PALETTE = "flare"
PNG_DPI = 200
_LOG_MANTISSAS = ((1,), (1, 3), (1, 2, 5), (1, 1.5, 2, 3, 5, 7))  # round values on a log y axis, sparse first


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
        facet_h = min(facet_w * 1.2, SLIDE_HEIGHT / max(n_rows, 1))  # fill the slide's height
    else:
        facet_h = min(facet_w * 0.8 + 0.6, 2.6)  # + room for titles and tick labels
    return facet_w, facet_h


def module_order(data: pd.DataFrame) -> pd.DataFrame:
    """Distinct (layer_index, module) pairs, by depth then name."""
    pairs = data[["layer_index", "module"]].drop_duplicates()
    return pairs.sort_values(["layer_index", "module"], ignore_index=True)


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


def add_legend_below(fig: Figure, handles: dict, title: str | None, under_legends: bool = False, **kwargs) -> Legend:
    """Figure legend under the panels, centred, in as many columns as the figure's width holds (one row when it
    can): the panels keep the page's width. ``under_legends``: under the figure's other legends too (a second row of
    entries). ``kwargs`` go to ``fig.legend``."""
    renderer = fig.canvas.get_renderer()
    room = fig.get_figwidth() * fig.dpi
    above = [*fig.axes, *(fig.legends if under_legends else [])]
    below = min((a.get_tightbbox(renderer).y0 for a in above if a.get_visible()), default=0.0)  # the lowest label
    top = fig.transFigure.inverted().transform((0, below))[1]
    ncol = max(len(handles), 1)
    while True:
        legend = fig.legend(list(handles.values()), list(handles), title=title, loc="upper center",
                            bbox_to_anchor=(0.5, top), ncol=ncol, frameon=False, **kwargs)
        if ncol == 1 or legend.get_window_extent(renderer).width <= room:
            return legend
        legend.remove()
        ncol -= 1


def font_pt(key: str) -> float:
    """A font size from the current rcParams ("small", 9, ...) in points."""
    return FontProperties(size=matplotlib.rcParams[key]).get_size_in_points()


def tensor_rank(name: str) -> tuple[int, str]:
    """Sort key of tensor kinds: ``out``, ``delta``, then the others by name."""
    order = {"out": 0, "delta": 1}
    return order.get(name, len(order)), name


def check_columns(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    """Raise a one-line :class:`~coordcheck.core.frame.FrameError` naming the columns ``df`` lacks."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise FrameError(f"not a {what}: missing columns {missing}")


def check_one_config(data: pd.DataFrame, by: list[str], what: str) -> None:
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


def nothing_left(df: pd.DataFrame, stat: str, tensor: str | None) -> str:
    """The message when filtering by ``stat`` (and ``tensor``) leaves no rows: what the table holds."""
    tensors = sorted(set(df["tensor"]) - {"loss"})
    stats = sorted(set(df["stat"]) - {"value"})
    want = f"stat={stat!r}" + (f", tensor={tensor!r}" if tensor is not None else "")
    return f"no rows with {want}; present: stats {stats}, tensors {tensors}"


def save_figure(fig: Figure, path: str | Path | None) -> None:
    """Write ``fig`` to ``<path>.pdf`` and ``<path>.png`` (a .pdf/.png suffix is replaced).

    The PDF is vector with every font embedded as TrueType (``pdf.fonttype`` 42: no Type 3 fonts, which some
    publishers refuse); the caption (:func:`add_caption`) and the title go into both files' metadata (the PDF's
    Subject and Title, the PNG's Description and Title), so the verdict travels with a figure copied out of its
    report."""
    if path is None:
        return
    path = Path(path)
    base = path.with_suffix("") if path.suffix.lower() in (".pdf", ".png") else path
    caption, title = caption_of(fig), fig.get_suptitle()
    metadata = {"pdf": {"Creator": "coordcheck", **({"Subject": caption} if caption else {}),
                        **({"Title": title} if title else {})},
                "png": {"Software": "coordcheck", **({"Description": caption} if caption else {}),
                        **({"Title": title} if title else {})}}
    subsetter = logging.getLogger("fontTools")  # it logs every font table it subsets at INFO (TrueType embedding):
    level = subsetter.level  # hundreds of lines under Hydra's logging, which shows INFO
    subsetter.setLevel(max(level, logging.WARNING))
    try:
        with matplotlib.rc_context({"pdf.fonttype": 42, "ps.fonttype": 42}):
            for fmt in ("pdf", "png"):
                target = base.with_name(f"{base.name}.{fmt}")
                # the temporary name ends in .tmp, so the format is given explicitly
                atomic_write(target, lambda tmp, fmt=fmt: fig.savefig(
                    tmp, format=fmt, dpi=PNG_DPI, bbox_inches="tight", metadata=metadata[fmt]))
    finally:
        subsetter.setLevel(level)


def add_caption(fig: Figure, text: str | None, size: Size = "paper", gap_pt: float = 6.0) -> None:
    """``text`` under everything the figure holds (panels, x labels, legends below them), from the left edge of the
    leftmost label, wrapped to the figure's width, in the legend's font of ``size``: what a paper's caption would say
    (the verdict). Call it once the layout is final; :func:`save_figure` copies it into the files' metadata. None or
    "": nothing."""
    if not text:
        return
    with figure_style(size):
        pt = font_pt("legend.fontsize")
    renderer = fig.canvas.get_renderer()
    boxes = [a.get_tightbbox(renderer) for a in [*fig.axes, *fig.legends] if a.get_visible()]
    boxes += [t.get_window_extent(renderer) for t in fig.texts if t.get_visible() and t.get_text()]  # supylabel
    boxes = [b for b in boxes if b is not None]
    to_fig = fig.transFigure.inverted()
    left = min((b.x0 for b in boxes), default=0.0)
    bottom = min((b.y0 for b in boxes), default=0.0) - gap_pt / 72 * fig.dpi
    x, y = to_fig.transform((max(left, 0.0), bottom))
    room = fig.get_figwidth() * fig.dpi - max(left, 0.0)
    wrapped = _wrap(text, room, FontProperties(size=pt), renderer)
    fig.text(x, y, wrapped, ha="left", va="top", fontsize=pt, color="0.15", gid=CAPTION_GID, linespacing=1.25,
             parse_math=False)  # a "$" in a cause line is a dollar, not mathtext


def caption_of(fig: Figure) -> str:
    """The caption :func:`add_caption` wrote (its lines joined again), or ""."""
    for text in fig.texts:
        if text.get_gid() == CAPTION_GID:
            return " ".join(text.get_text().split("\n"))
    return ""


def _wrap(text: str, width_px: float, font: FontProperties, renderer) -> str:
    """``text`` with line breaks so that no line is wider than ``width_px`` (words are never split)."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split():
            trial = f"{line} {word}" if line else word
            if line and renderer.get_text_width_height_descent(trial, font, ismath=False)[0] > width_px:
                lines.append(line)
                line = word
            else:
                line = trial
        lines.append(line)
    return "\n".join(lines)


def default_steps(recorded: np.ndarray, n: int, judged_until: int | None, include: Sequence[int]) -> list[int]:
    """Up to ``n`` steps spread over the judged ones (all when ``judged_until`` is None), the last recorded step
    when it lies beyond them, and every recorded step of ``include``."""
    judged = recorded if judged_until is None else recorded[recorded <= judged_until]
    shown = set(pick_steps(judged if len(judged) else recorded, n))
    if len(judged) < len(recorded):
        shown.add(int(recorded[-1]))
    return sorted(shown | ({int(s) for s in include} & set(recorded.tolist())))


def pick_steps(recorded: np.ndarray, n: int) -> list[int]:
    """Up to ``n`` recorded steps evenly spread, always the first and the last."""
    idx = np.unique(np.round(np.linspace(0, len(recorded) - 1, min(n, len(recorded)))).astype(int))
    return [int(recorded[i]) for i in idx]


def check_steps(steps: Sequence[int], recorded: np.ndarray) -> list[int]:
    """``steps`` as ints; a ValueError naming the recorded steps when some are not recorded (or none given)."""
    steps = [int(s) for s in steps]
    missing = sorted(set(steps) - set(recorded.tolist()))
    if missing or not steps:
        raise ValueError(f"steps {missing or steps} not recorded; recorded steps: {recorded.tolist()}")
    return steps


def label_log_y(ax, within: tuple[float, float] | None = None, extra: dict[float, str] | None = None) -> None:
    """A few round values labelled as plain numbers (0.5, 2, 100) on a log y axis, chosen
    from the final limits and the panel's height: the sparsest of decades, 1-3, 1-2-5,
    1-1.5-2-3-5-7 that gives three labels, never closer than 1.6 label heights (decades
    are thinned, a narrow axis gets linear round values), so that a flat muP line still
    has a scale and labels never touch.

    ``within``: the values are chosen between these (the data's range) instead of the axis limits, which may hold
    rows of marks outside it; ``extra``: ``{y: label}`` ticks added as they are (the "0" of the zeros' row), the
    round values too close to one left out."""
    lo, hi = ax.get_ylim()
    if not (0 < lo < hi):
        return
    height_pt = ax.get_position().height * ax.figure.get_figheight() * 72
    min_gap = 1.6 * font_pt("ytick.labelsize") / height_pt * math.log10(hi / lo)  # in decades
    if within is not None:
        lo, hi = max(lo, within[0]), min(hi, within[1])
    span = math.log10(hi / lo)

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
    digits = next(d for d in range(3, 10) if len({plain_number(t, d) for t in best}) == len(best) or d == 9)
    labels = {t: plain_number(t, digits) for t in best}
    for y, label in (extra or {}).items():
        labels = {t: text for t, text in labels.items() if abs(math.log10(t / y)) >= min_gap}
        labels[y] = label
    ticks = sorted(labels)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FixedFormatter([labels[t] for t in ticks]))
    ax.yaxis.set_minor_locator(NullLocator())


def plain_number(x: float, digits: int = 3) -> str:
    """0.03, 1.5, 1000 as written by hand (``digits`` significant digits at most); 1e-05
    and 2e+06 as 1e-5 and 2e6."""
    if x == 0:
        return "0"
    if 1e-4 <= abs(x) < 1e6:
        return np.format_float_positional(float(f"{x:.{digits}g}"), trim="-")
    mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def label_log2(ax, values: np.ndarray, every: int = 1, powers: bool = False) -> None:
    """log2 x axis ticked at ``values`` (the widths or depths present), written out (256) or, with ``powers``, as
    powers of two (2^8, for values that all are); with ``every=k`` only every k-th tick is labelled (always the
    largest)."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(values))
    keep = (len(values) - 1 - np.arange(len(values))) % every == 0
    labels = log2_labels(values, powers)
    ax.xaxis.set_major_formatter(FixedFormatter([text if k else "" for text, k in zip(labels, keep)]))
    ax.xaxis.set_minor_locator(NullLocator())
    lo, hi = float(values.min()), float(values.max())
    pad = 2 ** (0.15 * max(math.log2(hi / lo), 1.0))  # keep end markers off the frame
    ax.set_xlim(lo / pad, hi * pad)


def log2_labels(values: Sequence[float], powers: bool = False) -> list[str]:
    """Tick labels of ``values``: ``256`` as written, or with ``powers`` ``$2^{8}$`` (mathtext; ``$2^{-7}$`` for
    1/128)."""
    if powers:
        return [f"$2^{{{round(math.log2(v))}}}$" for v in values]
    return [str(int(v)) if float(v).is_integer() else plain_number(float(v), 6) for v in values]


def powers_of_two(values: Sequence[float]) -> bool:
    """Whether every value is an integer power of two (a width 2^k, a learning rate 2^-k)."""
    return all(v > 0 and math.log2(v) == round(math.log2(v)) for v in values)


def fit_log2_labels(axes: Sequence, values: np.ndarray) -> None:
    """x labels (:func:`label_log2`) that leave a gap between neighbours: every value at the tick font size or down to
    80% of it; when the numbers as written do not fit and the values are powers of two, as powers (2^10 is narrower
    than 1024); else every k-th value (always the largest) for the smallest k that fits."""
    ax = axes[0]
    renderer = ax.figure.canvas.get_renderer()
    full_pt = font_pt("xtick.labelsize")
    x = ax.transData.transform(np.c_[values, np.ones(len(values))])[:, 0]

    def every(pt: float, powers: bool) -> int:
        font = FontProperties(size=pt)
        half = np.array([renderer.get_text_width_height_descent(t, font, ismath=powers)[0] / 2
                         for t in log2_labels(values, powers)])
        pad = 0.3 * pt / 72 * ax.figure.dpi
        for k in range(1, len(values)):
            kept = np.arange(len(values))[::-1][::k][::-1]  # from the largest down
            if (np.diff(x[kept]) >= half[kept][:-1] + half[kept][1:] + pad).all():
                return k
        return max(1, len(values) - 1)

    sizes = (full_pt, 0.9 * full_pt, 0.8 * full_pt)
    forms = (False, True) if powers_of_two(values) else (False,)
    # fewest dropped, then as written before powers, then largest
    k, powers, pt = min(((every(pt, p), p, pt) for p in forms for pt in sizes), key=lambda kp: (kp[0], kp[1], -kp[2]))
    for ax in axes:
        label_log2(ax, values, every=k, powers=powers)
        ax.tick_params(axis="x", labelsize=pt)


def fit_titles(axes: Sequence, min_pt: float = 7.0, wrap: bool = False) -> None:
    """Shrink the titles of a row of panels (all alike) until neighbours leave a gap; with ``wrap``, titles of
    several words first break onto two lines (at the space nearest their middle) when they would shrink."""
    if len(axes) < 2:
        return
    fig = axes[0].figure
    renderer = fig.canvas.get_renderer()
    titles = [ax.title for ax in axes]
    pt = titles[0].get_fontsize()
    centres = [(ax.get_position().x0 + ax.get_position().x1) / 2 * fig.get_figwidth() * fig.dpi for ax in axes]
    pad = 2.0 * pt / 72 * fig.dpi  # two characters between titles

    def scale() -> float:
        half = [max(renderer.get_text_width_height_descent(line, t.get_fontproperties(), ismath=False)[0]
                    for line in t.get_text().split("\n")) / 2 for t in titles]  # the widest line of each
        return min((c1 - c0 - pad) / (h0 + h1) for c0, c1, h0, h1 in zip(centres, centres[1:], half, half[1:]))

    if wrap and scale() < 1:
        for title in titles:
            text = title.get_text()
            spaces = [i for i, c in enumerate(text) if c == " "]
            if spaces and "\n" not in text:
                at = min(spaces, key=lambda i: abs(i - len(text) / 2))
                title.set_text(text[:at] + "\n" + text[at + 1:])
    factor = scale()
    if factor < 1:
        for title in titles:
            title.set_fontsize(max(min_pt, pt * factor))
