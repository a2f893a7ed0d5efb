"""Gradient-flow figure: grad norm, activation std and grad/param ratio against layer index.

Stage: plot (analysis side; never imports torch). Input: a gradient-flow frame (schema in
:mod:`coordcheck.gradflow.schema`). Output: one matplotlib figure of three panels for one probe
step, written to ``<path>.pdf`` and ``<path>.png`` when a path is given (``gradflow.{png,pdf}``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from coordcheck.gradflow.checks import HEALTHY_RATIO, step_views

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_gradflow"]


def plot_gradflow(frame: pd.DataFrame, path: str | Path | None = None, *, step: int | None = None,
                  size: Literal["paper", "slides"] = "paper") -> Figure:
    """Three panels against layer index, for one probe step (default: the last): grad norm per
    parameter (log y), activation std per module (linear y), grad/param ratio (log y) with the
    healthy band 1e-3..1e-1 shaded. Points are coloured by role; the line is the per-layer
    median. Zero, None and non-finite values cannot sit on a log axis: they are counted in the
    panel. Written to ``<path>.pdf`` and ``<path>.png`` when ``path`` is given."""
    from coordcheck.plot import FIGURE_WIDTH, figure_style, save_figure, seaborn_modules

    views = {v.step: v for v in step_views(frame)}
    if not views:
        raise ValueError("no probe steps in the frame")
    v = views[max(views) if step is None else step]
    p, a = v.params.reset_index(), v.acts.reset_index()
    sns, plt = seaborn_modules()
    roles = sorted(set(p["role"]) | set(a["role"]))
    palette = dict(zip(roles, sns.color_palette("colorblind", len(roles))))
    panels = [  # (data, y column, label, log y)
        (p, "grad_norm", "‖grad‖₂ per parameter", True),
        (a, "std", "activation std per module", False),
        (p, "grad_param_ratio", "‖grad‖ / ‖param‖", True),
    ]
    with figure_style(size):
        width = FIGURE_WIDTH[size]
        fig, axes = plt.subplots(1, 3, figsize=(width, width * 0.36), layout="constrained")
        for ax, (df, col, label, log) in zip(axes, panels):
            y = df[col] if col in df else pd.Series(dtype=float)
            shown = np.isfinite(y) & ((y > 0) if log else True)
            d = df[shown]
            if log:
                ax.set_yscale("log")
            if col == "grad_param_ratio":
                ax.axhspan(*HEALTHY_RATIO, color="tab:green", alpha=0.12, linewidth=0, label="healthy band")
            if len(d):
                med = d.groupby("layer_index")[col].median()
                ax.plot(med.index, med.to_numpy(), color="0.5", linewidth=1, zorder=1)
                sns.scatterplot(data=d, x="layer_index", y=col, hue="role", palette=palette, ax=ax, s=14,
                                linewidth=0, legend=False, zorder=2)
            hidden = int((~shown).sum())
            why = "zero, None or non-finite" if log else "non-finite"
            ax.set_xlabel("layer index" + (f"\n({hidden} not shown: {why})" if hidden else ""))
            ax.set_ylabel("")
            ax.set_title(label, fontsize="small")
        handles = [plt.Line2D([], [], marker="o", linestyle="", color=palette[r]) for r in roles]
        fig.legend(handles, roles, title="role", loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
        fig.suptitle(f"gradient flow, step {v.step}", fontsize="small")
    save_figure(fig, path)
    return fig
