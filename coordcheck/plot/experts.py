"""The coordinate check against the number of experts: what the experts verdict judges, a line per step.

Stage: figures (analysis side; never imports torch). Input: a tidy frame whose jobs set ``experts`` and the places of
its modules (``config_id``/``module``/``place_kind`` as :func:`coordcheck.judge.experts.expert_places` finds them, or
the experts verdict's series). Output: a matplotlib Figure, and, when a path is given, ``<path>.pdf`` and
``<path>.png`` (:func:`~coordcheck.plot.helpers.save_figure`).

A panel per judged place, in the order of :data:`PANELS`: the routers' logits, each expert's change since step 0 (the
expert stacks' or pooled expert lists'), the mixture-of-experts layer's output, and the routers' load entropy against
its step-0 value (a ratio: its own y label). x is the number of experts on a log2 axis, y the panel's geometric mean
over its modules, then over seeds with their min-max as a band (log axis, spanning at least a factor
:data:`~coordcheck.plot.steplines.MIN_Y_SPAN`), a line per step, light (early) to dark (late), each with its own
marker; zeros and missing values are marked, not left out (:mod:`~coordcheck.plot.steplines`). Flat is what the
experts verdict expects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from coordcheck.core.frame import LOAD_TENSOR
from coordcheck.plot.helpers import Size, add_caption, save_figure
from coordcheck.plot.steplines import Block, Panel, chosen_steps, draw_blocks, pool, step_styles, summarise

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.figure import Figure

__all__ = ["plot_experts", "has_experts", "PANELS"]

# (place kind, tensor, statistic, title): what each panel shows
_LOAD_TITLE = "load entropy ÷ step 0"
PANELS = (("router", "out", None, "router logits"), ("experts", "delta", None, "expert change"),
          ("layer", "out", None, "MoE layer"), ("load", LOAD_TENSOR, "entropy", _LOAD_TITLE))
MAX_COLUMNS = {"paper": 4, "column": 2, "slides": 4}  # panels per line
_MIN_HEIGHT = {"paper": 1.9, "column": 1.4, "slides": 0.0}


def has_experts(frame: pd.DataFrame) -> bool:
    """Whether some configuration of ``frame`` was run at two numbers of experts or more."""
    if "experts" not in frame.columns:
        return False
    e = frame[frame["experts"] > 0]
    return bool(len(e)) and bool((e.groupby(["family_id", "width"])["experts"].nunique() >= 2).any())


def plot_experts(frame: pd.DataFrame, places: pd.DataFrame, path: str | Path | None = None, *, stat: str = "std",
                 steps: Sequence[int] | None = None, title: str | None = None, size: Size = "paper",
                 caption: str | None = None) -> Figure:
    """The figure of the module docstring; ``places``: ``module`` and ``place_kind`` with the frame's columns that
    name a job or family (``config_id``, or ``family_id``/``width``/``depth`` as the experts verdict's series have
    them). ``steps`` default to :func:`~coordcheck.plot.steplines.chosen_steps` (0, 1, 2, 5, ..., the last);
    ``title`` (None: none) goes above the panels, ``caption`` (the verdict) under them. Raises ValueError when the
    frame holds nothing to show."""
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
    if data.empty:
        raise ValueError("nothing to show against the number of experts (no router, expert or layer recorded)")
    recorded = np.sort(data["step"].unique())
    steps = list(steps) if steps is not None else chosen_steps(recorded)
    data = data[data["step"].isin(steps)]
    summary = summarise(pool(data, ["panel", "step", "experts", "seed"]), ["panel"], "experts")  # modules, then seeds
    titles = [p[3] for p in PANELS if p[3] in set(summary["panel"])]
    panels = [Panel(t, summary[summary["panel"] == t], t, ylabel="ratio" if t == _LOAD_TITLE else "")
              for t in titles]
    fig = draw_blocks([Block(panels)], step_styles(steps), x="experts", xs=np.sort(summary["experts"].unique()),
                      xlabel="experts", ylabel=f"{stat} (log scale)", size=size, max_cols=MAX_COLUMNS[size],
                      min_height=_MIN_HEIGHT[size], seeds=int(data["seed"].nunique()), title=title)
    add_caption(fig, caption, size)
    save_figure(fig, path)
    return fig
