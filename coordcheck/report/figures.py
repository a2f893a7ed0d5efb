"""The report's figures: the coord-check figure's defaults that show the verdict's evidence
(:func:`coord_figure_options`) and every figure a report writes (:func:`write_figures`).

Stage: report. Input: a :class:`coordcheck.report.compliance.Report` (its frame, slopes and verdict). Output: the
figures as PDF + PNG in the report's directory (:mod:`coordcheck.plot`, imported only when drawing), and the
coord-check figure as inline SVG with a tooltip per line for report.html (:mod:`coordcheck.report.html`). A figure
that cannot be drawn is a note in the report. Never imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordcheck.judge.verdict import NOT_JUDGED, Verdict
from coordcheck.report.html import coord_figures_html
from coordcheck.report.knobs import DEFAULT_LAYOUT

__all__ = ["coord_figure_options", "write_figures"]


def coord_figure_options(verdict: Verdict, *, row: str = "parametrization",
                         layout: str = DEFAULT_LAYOUT) -> dict[str, Any]:
    """The coord-check figure's defaults (keywords of :func:`coordcheck.plot.plot_coords`) that show the verdict's
    evidence: its statistic and title; the step and tensor of each configuration's worst series (a failing
    ``delta`` gets rows of its own below ``out``; the step is always a column); each configuration's judged window
    (``window_end``, by level of ``row``); the verdict as the caption, and its failing series (the panels where a
    module fails are framed in red with its slope); in the grid layout the worst modules drawn thick."""
    worst = verdict.worst(len(verdict.series)).drop_duplicates("config_id")  # each configuration's worst series
    configs = verdict.configs
    ends = (dict(zip(configs[row], configs["window_end"].astype(int)))
            if len(configs) and row in configs and configs[row].is_unique else None)
    series = verdict.series
    return {
        "stat": verdict.rules.stat,
        "title": None,  # the verdict is the caption's, as a paper prints it
        "caption": verdict.caption,
        "failing": series[series["in_window"] & (series["status"] == "fail")],
        "tensor": ["out", *sorted(set(worst["tensor"]) - {"out"})],
        "include_steps": sorted({int(s) for s in worst["step"]}),
        "window_end": ends,
        **({"highlight": verdict.worst_modules()} if layout == "grid" else {}),
    }


def write_figures(
    report: Any, out: Path, steps: list[int] | None, size: str, layout: str = DEFAULT_LAYOUT,
    page: tuple[dict[str, str], dict[str, dict]] | None = None,
) -> dict[str, str]:
    """Coord-check figure (``layout``: guide or grid), slope heatmap, loss curves and, when the verdict has evidence,
    the causes figure (PDF + PNG); a figure that cannot be drawn is noted. ``page``: (figures, tooltips) of
    report.html, to which the coord-check figure is added as inline SVG with a tooltip per line
    (:func:`coordcheck.report.html.coord_figures_html`)."""
    import matplotlib.pyplot as plt

    from coordcheck import plot

    frame, stat = report.frame, report.verdict.rules.stat
    varying = [c for c in ("parametrization", "optimizer", "lr", "data", "model") if frame[c].nunique() > 1]
    row = varying[0] if len(varying) == 1 else ("parametrization" if not varying else "config_id")
    configs = report.verdict.configs
    ends = dict(zip(configs["parametrization"], configs["window_end"].astype(int))) if len(configs) else None
    v = report.verdict
    shown = coord_figure_options(v, row=row, layout=layout)
    jobs = {
        "coord_check": lambda: plot.plot_coords(frame, out / "coord_check", steps=steps, row=row, size=size,
                                                layout=layout, **shown),
        "slopes": lambda: plot.plot_slopes(report.slopes, out / "slopes", stat=stat, size=size, window_end=ends,
                                           title=v.title),
        "loss": lambda: plot.plot_loss(frame, out / "loss", size=size),
    }
    if len(v.evidence):  # which knob: written only when the verdict measured causes
        jobs["causes"] = lambda: plot.plot_causes(v.evidence, out / "causes", size=size, caption=v.caption)
    if plot.has_depths(frame):  # a depth sweep: the check against depth; a width x depth grid: both slopes. The
        # width figures hold one configuration per panel, and each depth is one: the depth figures replace them
        labels = plot.family_labels(frame, report.facts)
        jobs = {k: draw for k, draw in jobs.items() if k == "causes"}
        jobs["coord_check_depth"] = lambda: plot.plot_depth(frame, out / "coord_check_depth", steps=steps,
                                                            size=size, caption=v.caption, labels=labels)
        if plot.has_grid(frame):
            jobs["slopes_grid"] = lambda: plot.plot_grid_slopes(frame, out / "slopes_grid", size=size,
                                                                caption=v.caption, labels=labels)
    if v.experts is not None and plot.has_experts(frame):  # the check against the number of experts; at one width
        jobs = {k: draw for k, draw in jobs.items() if k == "causes" or v.width_status != NOT_JUDGED}
        said = f"Coordinate check against the number of experts — {v.experts.status.upper()}: {v.experts.reason}"
        jobs["coord_check_experts"] = lambda: plot.plot_experts(frame, v.experts.series, out / "coord_check_experts",
                                                                stat=stat, size=size, caption=said)
    figures = {}
    for name, draw in jobs.items():
        try:
            fig = draw()
        except ValueError as e:  # e.g. several configurations that one panel cannot hold
            report.notes.append(f"figure {name} skipped: {e}")
            continue
        if name == "coord_check" and page is not None:  # report.html: the same figure, a tooltip per line, and a
            # line per module beside a figure that pools them
            grid = None if layout == "grid" else lambda: plot.plot_coords(
                frame, steps=steps, row=row, size=size, layout="grid",
                **{**coord_figure_options(v, row=row, layout="grid"), "caption": None})  # the page's figure has it
            page[0][f"{name}.png"], more = coord_figures_html(fig, frame, v, layout, grid)
            page[1].update(more)
        plt.close(fig)
        figures.update({f"{name} ({ext})": f"{name}.{ext}" for ext in ("png", "pdf")})
    return figures
