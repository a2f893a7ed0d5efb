"""The loss figure: training loss against step, one line per width, one panel per parametrization.

Stage: figures (analysis side; never imports torch). Input: the loss rows of a tidy frame
(:mod:`coordcheck.core.frame`). Output: a matplotlib Figure, saved as ``<path>.pdf`` and
``<path>.png`` when a path is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from coordcheck.core.frame import LOSS_MODULE, conform
from coordcheck.plot.helpers import (
    WIDTH_PALETTE, Size, add_legend, check_one_config, facet_size, figure_style, legend_line, save_figure,
    seaborn_modules,
)

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.figure import Figure

__all__ = ["plot_loss"]


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
    check_one_config(data, by=["parametrization"], what="parametrization")
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
