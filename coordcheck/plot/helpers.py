"""Shared helpers of the figures: page sizes, the seaborn theme, legends, input checks and saving.

Stage: figures (analysis side; never imports torch). Input: none (helpers called by the figure modules
:mod:`~coordcheck.plot.coords`, :mod:`~coordcheck.plot.slopes`, :mod:`~coordcheck.plot.loss`,
:mod:`~coordcheck.plot.causes` and the figures of :mod:`coordcheck.transfer` and :mod:`coordcheck.gradflow`).
Output: the constants every figure shares (:data:`FIGURE_WIDTH`, :data:`PNG_DPI`, ...), a scoped theme, facet
sizes, legend handles, one-line errors for tables that cannot be drawn, and :func:`save_figure`, which writes
``<path>.pdf`` and ``<path>.png`` atomically next to each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import matplotlib
import pandas as pd
from matplotlib import rcsetup
from matplotlib.font_manager import FontProperties
from matplotlib.legend import Legend
from matplotlib.lines import Line2D

from coordcheck.frame import FrameError, atomic_write
from coordcheck.slopes import CONFIG_COLUMNS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Size", "FIGURE_WIDTH", "SLIDE_HEIGHT", "WIDTH_PALETTE", "PNG_DPI", "seaborn_modules", "figure_style",
           "facet_size", "module_order", "legend_line", "add_legend", "font_pt", "tensor_rank", "check_columns",
           "check_one_config", "nothing_left", "save_figure"]

Size = Literal["paper", "slides"]

# Total figure widths in inches, and the seaborn plotting context used at that size.
# "paper" spans a two-column page (~7 in); "slides" fills a 16:9 slide (12 x 6.75 in).
FIGURE_WIDTH = {"paper": 7.0, "slides": 12.0}
SLIDE_HEIGHT = 6.75
_CONTEXT = {"paper": ("paper", 1.0), "slides": ("notebook", 1.15)}
_LEGEND_W = {"paper": 1.3, "slides": 2.0}  # room kept for the legend on the right

WIDTH_PALETTE = "flare"
PNG_DPI = 200


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


def font_pt(key: str) -> float:
    """A font size from the current rcParams ("small", 9, ...) in points."""
    return FontProperties(size=matplotlib.rcParams[key]).get_size_in_points()


def tensor_rank(name: str) -> tuple[int, str]:
    """Sort key of tensor kinds: ``out``, ``delta``, then the others by name."""
    order = {"out": 0, "delta": 1}
    return order.get(name, len(order)), name


def check_columns(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    """Raise a one-line :class:`~coordcheck.frame.FrameError` naming the columns ``df`` lacks."""
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
