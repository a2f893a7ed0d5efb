"""The causes figure: which knob is off — each parameter's measured width exponents against the band muP allows.

Stage: figures (analysis side; never imports torch). Input: the verdict's evidence table
(``Verdict.evidence``, made by :mod:`coordcheck.judge.explain`): one row per (configuration, name,
measure) with the columns :data:`DRAWN_COLUMNS` — ``name`` a parameter, module or class label,
``measure`` what was fitted against width (``init``: the initialisation gain at step 0, ``lr``:
the effective learning rate, ``own``: the module's own update, ``eps``: Adam's epsilon share, or
another), ``exponent`` the fitted slope of log2(value) against log2(width) with its 95% interval
``ci_low``/``ci_high``, ``expected_low``/``expected_high`` the band muP allows (either may be
infinite: one-sided), ``violates`` the verdict's judgement and ``order`` the call order; ``status`` (the verdict's
word for the row: pass, fail, skip, transient, inconclusive), when the table has it. Output: a
matplotlib Figure, saved as ``<path>.pdf`` and ``<path>.png`` when a path is given.

The layout is a forest plot: one row per name, first in call order on top, shared across a
panel column per measure (left to right :data:`MEASURE_ORDER`, then any others by name), one
row of panels per parametrization. In each panel the band muP allows is shaded behind each row,
the measured exponent is a point with its interval as a bar, and a violator is a red cross with
its exponent written beside it and its name in red: reading down the red names and across to
their panel answers "which parameter, which knob".

A point's marker says where it lies and what the verdict made of it (:func:`marks`), never one without the other:
``violates`` is the verdict's judgement, which asks more than the point's place (the whole 95% interval outside the
band, at more than one step, an ε share that matters; the readout's own update is not judged when its multiplier
is applied outside it), so a point outside its band that the verdict did not fail is an open diamond with the
verdict's word beside it ("not judged", "transient", ...), not the dot that means "within the band".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MaxNLocator
from matplotlib.transforms import blended_transform_factory

from coordcheck.plot.helpers import (
    FIGURE_WIDTH, SLIDE_HEIGHT, Size, add_caption, add_legend, check_columns, check_one_config, figure_style,
    fit_titles, plain_number, save_figure, seaborn_modules,
)

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from matplotlib.figure import Figure

__all__ = ["plot_causes", "measure_order", "marks", "DRAWN_COLUMNS", "MEASURE_ORDER", "MEASURE_TITLES",
           "VIOLATES_COLOUR", "VIOLATES_LABEL", "INSIDE_LABEL", "OUTSIDE_LABEL", "STATUS_WORDS", "OVERLAPS", "NO_SLOPE",
           "NO_EVIDENCE"]

# the columns of Verdict.evidence this figure reads (the table may hold more)
DRAWN_COLUMNS = ["config_id", "parametrization", "name", "measure", "exponent", "ci_low", "ci_high",
                 "expected_low", "expected_high", "violates", "order"]
MEASURE_ORDER = ("init", "lr", "own", "eps")  # the knobs in the order a model is built, then trained
MEASURE_TITLES = {"init": "initialisation", "lr": "learning rate", "own": "own update", "eps": "Adam ε share",
                  "adam_eps": "Adam ε", "mult": "output multiplier", "wd": "weight decay"}

VIOLATES_COLOUR = "#d62728"  # the red of the coord-check figure's first highlighted module
INSIDE_COLOUR = "0.3"
BAND_COLOUR = "#4c9a6a"  # a muted green: the region muP allows
BAND_ALPHA = 0.22
VIOLATES_LABEL = "violates muP"  # the label of the violators' error bars (and their legend entry)
INSIDE_LABEL = "within the band"
OUTSIDE_LABEL = "outside the band, not failed"
OUTSIDE_COLOUR = "0.15"
STATUS_WORDS = {"skip": "not judged", "transient": "transient", "inconclusive": "undecided", "zero": "zero",
                "pass": "passed"}  # beside an outside point: why the verdict did not fail it
OVERLAPS = "overlaps"  # beside an outside point that passes because its interval reaches the band
MIN_SPAN = 1.0  # a panel's x axis spans at least this many width exponents: a flat band never fills it
ROW_IN = {"paper": 0.24, "column": 0.2, "slides": 0.32}  # inches per name
MAX_HEIGHT = 9.0  # a paper figure grows with the number of names up to this, then the names shrink
MIN_LABEL_PT = 4.0
NO_SLOPE = "no slope"  # written in a row whose exponent is NaN: values zero or not finite, or too few widths
NO_EVIDENCE = ("no evidence to draw: Verdict.evidence is empty (the causes need the `own` rows of the probes: "
               "each module's initialisation gain and own update)")


def measure_order(measures: Iterable[str]) -> list[str]:
    """The measures present, :data:`MEASURE_ORDER` first, then the others by name."""
    present = set(measures)
    return [m for m in MEASURE_ORDER if m in present] + sorted(present - set(MEASURE_ORDER))


def marks(evidence: pd.DataFrame) -> pd.Series:
    """The marker of each row of an evidence table (:data:`DRAWN_COLUMNS`, ``status`` when present): "violates"
    (``violates``: the verdict failed it), "inside" (not failed and ``exponent`` within ``[expected_low,
    expected_high]``, or no band to hold it against), "outside" (not failed, yet outside its band) or "" (no exponent
    to draw). The dot that means "within the band" is only ever drawn for a point that is."""
    x = pd.to_numeric(evidence["exponent"], errors="coerce").astype(float)
    lo = pd.to_numeric(evidence["expected_low"], errors="coerce").astype(float)
    hi = pd.to_numeric(evidence["expected_high"], errors="coerce").astype(float)
    violates = evidence["violates"].fillna(False).astype(bool)
    banded = lo.notna() & hi.notna()
    inside = ~banded | ((x >= lo) & (x <= hi))
    out = np.where(violates, "violates", np.where(inside, "inside", "outside"))
    return pd.Series(np.where(np.isfinite(x), out, ""), index=evidence.index)


def plot_causes(
    evidence: pd.DataFrame,
    path: str | Path | None = None,
    *,
    size: Size = "paper",
    title: str | None = None,
    caption: str | None = None,
) -> Figure:
    """Each name's measured width exponents, one panel column per measure, against the band muP allows.

    Reads :data:`DRAWN_COLUMNS` of ``evidence`` (the contract's ``Verdict.evidence``; more columns
    are ignored). Rows are the names of a parametrization sorted by ``order`` (then by name), top
    to bottom; columns are the measures (:func:`measure_order`); a row of panels per
    ``parametrization``, each holding one configuration (one ``config_id``). x is the exponent in
    width (0 = width-invariant, marked by a thin line); the shaded bar behind a row is
    ``[expected_low, expected_high]`` (an infinite edge runs to the panel's edge; no bar when NaN);
    the point is ``exponent`` with the bar ``[ci_low, ci_high]``. Rows with ``violates`` are red
    crosses (error bars labelled :data:`VIOLATES_LABEL`) with the exponent written beside them,
    and their names are red; the others within their band are grey dots (:data:`INSIDE_LABEL`), and those outside
    it that the verdict did not fail are open diamonds (:data:`OUTSIDE_LABEL`) with the verdict's word for them beside
    them (:data:`STATUS_WORDS` of ``status``: "not judged", "transient", ...; :data:`OVERLAPS` for one that passes
    because its interval reaches the band; :func:`marks`). A name not measured
    in a panel leaves its row there empty; a NaN exponent (values zero or not finite, e.g. the gain
    of a zero-initialised layer at step 0, or too few widths to fit) is written :data:`NO_SLOPE`.

    ``title`` (None: none) goes above the panels, ``caption`` (the verdict) under them
    (:func:`~coordcheck.plot.helpers.add_caption`).

    Raises ``ValueError`` for an empty table (:data:`NO_EVIDENCE`) or several configurations per
    parametrization, and :class:`~coordcheck.core.frame.FrameError` for missing columns.
    """
    if evidence.empty:  # with or without columns: a verdict that measured no cause
        raise ValueError(NO_EVIDENCE)
    check_columns(evidence, DRAWN_COLUMNS, "causes evidence table")
    check_one_config(evidence, by=["parametrization"], what="parametrization")
    data = evidence[[*DRAWN_COLUMNS, *(["status"] if "status" in evidence.columns else [])]].copy()
    data["violates"] = data["violates"].fillna(False).astype(bool)
    data["mark"] = marks(data)
    data["status"] = data["status"].astype(str) if "status" in data else ""
    for c in ("exponent", "ci_low", "ci_high", "expected_low", "expected_high"):
        data[c] = pd.to_numeric(data[c], errors="coerce").astype(float)
    rows = sorted(data["parametrization"].astype(str).unique())
    data["parametrization"] = data["parametrization"].astype(str)
    measures = measure_order(data["measure"].astype(str))
    names = {par: _name_order(data[data["parametrization"] == par]) for par in rows}
    limits = {m: _x_limits(data[data["measure"] == m]) for m in measures}

    n_names = sum(len(n) for n in names.values())
    if size == "slides":
        height = SLIDE_HEIGHT
    else:  # grow with the number of names so that every name stays readable
        height = min(MAX_HEIGHT, ROW_IN[size] * n_names + 0.45 * len(rows) + 0.9)
    row_pt = 72 * (height - 0.9 - 0.45 * len(rows)) / n_names  # points per name
    _, plt = seaborn_modules()
    with figure_style(size):
        tick_pt = FontProperties(size=matplotlib.rcParams["ytick.labelsize"]).get_size_in_points()
        label_pt = min(tick_pt, max(MIN_LABEL_PT, 0.8 * row_pt))
        fig, axes = plt.subplots(
            len(rows), len(measures), figsize=(FIGURE_WIDTH[size], height), squeeze=False, sharex="col",
            sharey="row", layout="constrained", gridspec_kw={"height_ratios": [len(names[p]) + 1 for p in rows]},
        )
        fig.get_layout_engine().set(wspace=0.07)  # the end labels of neighbouring x axes keep apart
        for i, par in enumerate(rows):
            order = {n: k for k, n in enumerate(names[par])}
            for j, measure in enumerate(measures):
                ax = axes[i, j]
                panel = data[(data["parametrization"] == par) & (data["measure"] == measure)]
                _draw_panel(ax, panel.assign(y=panel["name"].map(order)), limits[measure])
                word = MEASURE_TITLES.get(measure, measure)
                ax.set_title(f"{par} · {word}" if len(rows) > 1 else word)
                ax.set_xlabel("")
            ax = axes[i, 0]
            ax.set_yticks(range(len(names[par])), names[par])
            ax.set_ylim(len(names[par]) - 0.5, -0.5)  # first in call order on top
            ax.tick_params(axis="y", labelsize=label_pt, length=0)
            bad = set(data.loc[(data["parametrization"] == par) & data["violates"], "name"])
            for label in ax.get_yticklabels():
                if label.get_text() in bad:
                    label.set_color(VIOLATES_COLOUR)
                    label.set_fontweight("bold")
        fig.supxlabel("exponent in width: slope of log2 value against log2 width (bars: 95% interval)",
                      fontsize=matplotlib.rcParams["axes.labelsize"])
        if title:
            fig.suptitle(title)
        handles = {}  # the markers drawn, and the band
        if (data["mark"] == "inside").any():
            handles[INSIDE_LABEL] = Line2D([], [], color=INSIDE_COLOUR, marker="o", linestyle="", markersize=5)
        if (data["mark"] == "violates").any():
            handles[VIOLATES_LABEL] = Line2D([], [], color=VIOLATES_COLOUR, marker="X", linestyle="", markersize=7)
        if (data["mark"] == "outside").any():
            handles[f"{OUTSIDE_LABEL}\n(why: the word beside it)"] = Line2D(
                [], [], color=OUTSIDE_COLOUR, marker="D", linestyle="", markersize=5, markerfacecolor="white",
                markeredgewidth=1.1)
        handles["band muP allows"] = Patch(facecolor=BAND_COLOUR, alpha=BAND_ALPHA, linewidth=0)
        add_legend(fig, handles, "measured exponent")
        fig.canvas.draw()  # the constrained layout settles the panels' widths
        for i in range(len(rows)):
            fit_titles(list(axes[i]), wrap=True)
        for j in range(len(measures)):  # as many round exponents as the panel's width holds, written by hand
            width_in = axes[0, j].get_position().width * fig.get_figwidth()
            axes[-1, j].xaxis.set_major_locator(MaxNLocator(nbins=max(2, min(4, int(width_in / 0.4))),
                                                            steps=[1, 2, 2.5, 5, 10]))
            axes[-1, j].xaxis.set_major_formatter(FuncFormatter(lambda v, _: plain_number(v + 0.0, 2)))
    add_caption(fig, caption, size)
    save_figure(fig, path)
    return fig


def _name_order(data: pd.DataFrame) -> list[str]:
    """The names of one parametrization by their call order (the smallest ``order`` of a name), then by name."""
    first = data.groupby("name", observed=True)["order"].min().reset_index()
    return first.sort_values(["order", "name"], kind="stable")["name"].astype(str).tolist()


def _x_limits(data: pd.DataFrame) -> tuple[float, float]:
    """A measure's x range: every finite exponent, interval and band edge, and 0, spanning at least
    :data:`MIN_SPAN`, padded, with room on the right for the violators' numbers."""
    values = data[["exponent", "ci_low", "ci_high", "expected_low", "expected_high"]].to_numpy(float).ravel()
    values = np.append(values[np.isfinite(values)], 0.0)
    lo, hi = float(values.min()), float(values.max())
    if hi - lo < MIN_SPAN:
        mid = (hi + lo) / 2
        lo, hi = mid - MIN_SPAN / 2, mid + MIN_SPAN / 2
    span = hi - lo
    # room on the right for "+1.02" beside a cross, more for a word beside an open diamond
    right = 0.45 if (marks(data) == "outside").any() else 0.25 if data["violates"].any() else 0.06
    return lo - 0.06 * span, hi + right * span


def _draw_panel(ax, panel: pd.DataFrame, limits: tuple[float, float]) -> None:
    """Bands, the zero line, and the points with their intervals of one (parametrization, measure)."""
    lo, hi = limits
    ax.set_xlim(lo, hi)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]))  # few round exponents
    ax.axvline(0.0, color="0.55", linewidth=0.8, zorder=1)
    if panel.empty:
        ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="0.4",
                fontsize="small")
        return
    band = panel[panel["expected_low"].notna() & panel["expected_high"].notna()]
    left = band["expected_low"].clip(lower=lo - (hi - lo))  # an infinite edge runs past the panel's
    right = band["expected_high"].clip(upper=hi + (hi - lo))
    ax.barh(band["y"], right - left, left=left, height=0.72, color=BAND_COLOUR, alpha=BAND_ALPHA, linewidth=0,
            zorder=0)
    drawn = panel[np.isfinite(panel["exponent"])]
    at_left = blended_transform_factory(ax.transAxes, ax.transData)
    for y in panel.loc[~np.isfinite(panel["exponent"]), "y"]:  # e.g. a zero-initialised layer's gain at step 0
        ax.text(0.02, y, NO_SLOPE, transform=at_left, ha="left", va="center", fontsize="xx-small", color="0.4",
                zorder=4)
    for mark, colour, marker, ms, label in (("inside", INSIDE_COLOUR, "o", 4.5, INSIDE_LABEL),
                                            ("outside", OUTSIDE_COLOUR, "D", 4.5, OUTSIDE_LABEL),
                                            ("violates", VIOLATES_COLOUR, "X", 7.0, VIOLATES_LABEL)):
        part = drawn[drawn["mark"] == mark]
        if part.empty:
            continue
        x = part["exponent"].to_numpy(float)
        below = np.nan_to_num(x - part["ci_low"].to_numpy(float), nan=0.0).clip(min=0)  # no interval: no bar
        above = np.nan_to_num(part["ci_high"].to_numpy(float) - x, nan=0.0).clip(min=0)
        bars = ax.errorbar(x, part["y"].to_numpy(float), xerr=[below, above], fmt=marker, color=colour, markersize=ms,
                           markeredgewidth=1.1 if mark == "outside" else 0, elinewidth=1.3, capsize=2, zorder=3,
                           label=label)
        if mark == "outside":  # open: not the dot of a point within its band
            bars.lines[0].set_markerfacecolor("white")
        if mark == "violates":
            words = [f"{round(xi, 2) + 0.0:+.2f}" for xi in x]  # + 0.0: no "-0.00"
        elif mark == "outside":  # why the verdict did not fail it
            reaches = (part["ci_low"] <= part["expected_high"]) & (part["ci_high"] >= part["expected_low"])
            words = [OVERLAPS if st == "pass" and r else STATUS_WORDS.get(st, st)
                     for st, r in zip(part["status"], reaches)]
        else:
            words = []
        lo, hi = limits
        for word, yi, start, end in zip(words, part["y"], x - below, x + above):
            if not word:
                continue
            # in the room the x range keeps on the right, not in the layout's; left of a bar that runs into it; over
            # the point when the bar spans the panel
            if (end - lo) / (hi - lo) < 0.75:
                at, offset, ha, va = end, (3, 0), "left", "center"
            elif (start - lo) / (hi - lo) > 0.3:
                at, offset, ha, va = start, (-3, 0), "right", "center"
            else:
                at, offset, ha, va = (start + end) / 2, (0, 3), "center", "bottom"
            ax.annotate(word, xy=(at, yi), xytext=offset, textcoords="offset points", va=va, ha=ha,
                        fontsize="x-small", color=colour, zorder=4,
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.3, "alpha": 0.8}).set_in_layout(False)
