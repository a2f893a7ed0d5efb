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
from matplotlib.ticker import MaxNLocator

from coordcheck.gradflow.checks import diagnose
from coordcheck.gradflow.registry import Diagnosis, step_views

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_gradflow", "DIAGNOSED"]


DIAGNOSED = "diagnosed"  # the gid of the rings around what a diagnosis names


def plot_gradflow(frame: pd.DataFrame, path: str | Path | None = None, *, step: int | None = None,
                  size: Literal["paper", "slides"] = "paper", diagnoses: list[Diagnosis] | None = None) -> Figure:
    """Three panels against layer index, for one probe step (default: the last): grad norm per
    parameter (log y), activation std per module (linear y), grad/param ratio (log y; shown, not
    judged: :data:`~coordcheck.gradflow.checks.RATIO_NOT_JUDGED`, so no band). Points are
    coloured by role; the line is the per-layer median. What the figure marks is what the report
    says: the parameters and modules a diagnosis names at this step (``diagnoses``, default
    :func:`~coordcheck.gradflow.checks.diagnose` of ``frame``) are ringed in red, or, when zero or
    None (a dead layer), crossed at the bottom of the panel. Zero, None and non-finite values
    cannot sit on a log axis: they are counted in the panel. Written to
    ``<path>.pdf`` and ``<path>.png`` when ``path`` is given."""
    from coordcheck.plot import FIGURE_WIDTH, figure_style, save_figure, seaborn_modules

    views = {v.step: v for v in step_views(frame)}
    if not views:
        raise ValueError("no probe steps in the frame")
    v = views[max(views) if step is None else step]
    diagnoses = diagnose(frame) if diagnoses is None else diagnoses
    named = {n for d in diagnoses if v.step in d.steps or not d.steps for n in d.names}
    p, a = v.params.reset_index(), v.acts.reset_index()
    layers = pd.concat([p["layer_index"], a["layer_index"]])
    depth = (float(layers.min()), float(layers.max())) if len(layers) else (0.0, 1.0)
    sns, plt = seaborn_modules()
    roles = sorted(set(p["role"]) | set(a["role"]))
    palette = dict(zip(roles, sns.color_palette("colorblind", len(roles))))
    panels = [  # (data, y column, label, log y)
        (p, "grad_norm", "‖grad‖₂ per parameter", True),
        (a, "std", "activation std per module", False),
        (p, "grad_param_ratio", "‖grad‖ / ‖param‖ (not judged)", True),
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
            if len(d):
                med = d.groupby("layer_index")[col].median()
                ax.plot(med.index, med.to_numpy(), color="0.5", linewidth=1, zorder=1)
                sns.scatterplot(data=d, x="layer_index", y=col, hue="role", palette=palette, ax=ax, s=14,
                                linewidth=0, legend=False, zorder=2)
                hit = d[d["name"].isin(named)]
                if len(hit):
                    ax.scatter(hit["layer_index"], hit[col], s=60, facecolors="none", edgecolors="tab:red",
                               linewidths=1.2, zorder=3, gid=DIAGNOSED)
            off = df[~shown & df["name"].isin(named)]  # a finding a log axis cannot show: a cross at the bottom
            if len(off):
                ax.scatter(off["layer_index"], np.full(len(off), 0.02), transform=ax.get_xaxis_transform(),
                           marker="x", s=30, color="tab:red", linewidths=1.2, zorder=3, clip_on=False, gid=DIAGNOSED)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlim(depth[0] - 0.3, depth[1] + 0.3)  # every layer, also those with nothing to draw here
            hidden = int((~shown).sum())
            why = "zero, None or non-finite" if log else "non-finite"
            ax.set_xlabel("layer index" + (f"\n({hidden} not shown: {why})" if hidden else ""))
            ax.set_ylabel("")
            ax.set_title(label, fontsize="small")
        handles = [plt.Line2D([], [], marker="o", linestyle="", color=palette[r]) for r in roles]
        labels = list(roles)
        if named:
            handles += [plt.Line2D([], [], marker="o", linestyle="", markerfacecolor="none", markeredgecolor="tab:red",
                                   markersize=8),
                        plt.Line2D([], [], marker="x", linestyle="", color="tab:red", markersize=6)]
            labels += ["named in a\ndiagnosis", "... zero or None\n(at the bottom)"]
        fig.legend(handles, labels, title="role", loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
        fig.suptitle(f"gradient flow, step {v.step}", fontsize="small")
    save_figure(fig, path)
    return fig
