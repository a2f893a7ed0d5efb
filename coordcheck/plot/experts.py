"""The coordinate check against the number of experts: what the experts verdict judges, a line per step.

Stage: figures (analysis side; never imports torch). Input: a tidy frame whose jobs set ``experts`` and the places of
its modules (``config_id``/``module``/``place_kind`` as :func:`coordcheck.judge.experts.expert_places` finds them, or
the experts verdict's series). Output: a matplotlib Figure, and, when a path is given, ``<path>.pdf`` and
``<path>.png`` (:func:`~coordcheck.plot.helpers.save_figure`).

A panel per judged place, in the order of :data:`PANELS`: the routers' logits, each expert's change since step 0 (the
expert stacks' or pooled expert lists'), the mixture-of-experts layer's output, and the routers' load entropy against
its step-0 value. x is the number of experts on a log2 axis, y the panel's geometric mean over its modules and seeds
(log axis), a line per step, light (early) to dark (late). Flat is what the experts verdict expects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from coordcheck.core.frame import LOAD_TENSOR
from coordcheck.plot.coords import MAX_GUIDE_STEPS, STEP_PALETTE
from coordcheck.plot.helpers import (
    Size, add_legend, default_steps, facet_size, figure_style, fit_titles, label_log2, label_log_y, legend_line,
    save_figure, seaborn_modules,
)

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.figure import Figure

__all__ = ["plot_experts", "has_experts", "PANELS"]

# (place kind, tensor, statistic, title): what each panel shows
PANELS = (("router", "out", None, "router logits"), ("experts", "delta", None, "expert change"),
          ("layer", "out", None, "MoE layer"), ("load", LOAD_TENSOR, "entropy", "load entropy ÷ step 0"))


def has_experts(frame: pd.DataFrame) -> bool:
    """Whether some configuration of ``frame`` was run at two numbers of experts or more."""
    if "experts" not in frame.columns:
        return False
    e = frame[frame["experts"] > 0]
    return bool(len(e)) and bool((e.groupby(["family_id", "width"])["experts"].nunique() >= 2).any())


def plot_experts(frame: pd.DataFrame, places: pd.DataFrame, path: str | Path | None = None, *, stat: str = "std",
                 steps: Sequence[int] | None = None, title: str | None = None, size: Size = "paper") -> Figure:
    """The figure of the module docstring; ``places``: ``module`` and ``place_kind`` with the frame's columns that
    name a job or family (``config_id``, or ``family_id``/``width``/``depth`` as the experts verdict's series have
    them). Raises ValueError
    when the frame holds nothing to show."""
    on = [c for c in ("config_id", "family_id", "width", "depth", "module") if c in places.columns]
    df = frame[frame["experts"] > 0].merge(places[[*on, "place_kind"]].drop_duplicates(), on=on)
    parts = []
    for kind, tensor, panel_stat, name in PANELS:
        part = df[(df["place_kind"] == kind) & (df["tensor"] == tensor) & (df["stat"] == (panel_stat or stat))]
        if kind == "load" and len(part):
            base = part[part["step"] == 0].set_index(["config_id", "seed", "module"])["value"]
            part = part.assign(value=part["value"].to_numpy() / base.reindex(
                pd.MultiIndex.from_frame(part[["config_id", "seed", "module"]])).to_numpy())
        parts.append(part.assign(panel=name))
    data = pd.concat(parts, ignore_index=True)
    data = data[np.isfinite(data["value"]) & (data["value"] > 0)]
    if data.empty:
        raise ValueError("nothing to show against the number of experts (no router, expert or layer recorded)")
    recorded = np.sort(data["step"].unique())
    steps = list(steps) if steps is not None else default_steps(recorded, MAX_GUIDE_STEPS, None, ())
    data = data[data["step"].isin(steps)].assign(log=lambda d: np.log(d["value"]))
    mean = data.groupby(["panel", "step", "experts"], as_index=False)["log"].mean().assign(
        value=lambda d: np.exp(d["log"]))
    sns, _ = seaborn_modules()
    panels = [p[3] for p in PANELS if p[3] in set(mean["panel"])]
    palette = dict(zip(steps, sns.color_palette(STEP_PALETTE, len(steps))))
    facet_w, facet_h = facet_size(size, 1, len(panels), max_cols=4)
    counts = np.sort(mean["experts"].unique())
    with figure_style(size):
        g = sns.FacetGrid(mean, col="panel", col_order=panels, sharey=False, height=facet_h, aspect=facet_w / facet_h)
        g.map_dataframe(sns.lineplot, x="experts", y="value", hue="step", hue_order=steps, palette=palette,
                        marker="o", markersize=4, linewidth=1.2, legend=False)
        for ax in g.axes.flat:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            label_log2(ax, counts)
            label_log_y(ax)
        g.set_titles(col_template="{col_name}")
        fit_titles(list(g.axes.flat))
        g.set_axis_labels("experts", stat)
        add_legend(g.figure, {str(s): legend_line(palette[s], marker="o") for s in steps}, "step")
        if title:
            g.figure.suptitle(title, fontsize="medium", y=1.04)
    save_figure(g.figure, path)
    return g.figure
