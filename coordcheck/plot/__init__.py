"""Figures: the coordinate-check figure, the slope heatmap, the loss curves, the causes and the depth figures.

Stage: figures (analysis side; never imports torch), one module per figure over shared helpers:
:mod:`~coordcheck.plot.coords` (:func:`plot_coords`: an activation statistic against width, grid or
guide layout), :mod:`~coordcheck.plot.slopes` (:func:`plot_slopes`: the width exponent of every module
at every step), :mod:`~coordcheck.plot.loss` (:func:`plot_loss`), :mod:`~coordcheck.plot.causes`
(:func:`plot_causes`: each cause's measured exponents against the band muP allows),
:mod:`~coordcheck.plot.depth` (:func:`plot_depth`: the coordinate check against depth; :func:`plot_grid_slopes`: the
width and depth slopes of a width x depth grid), :mod:`~coordcheck.plot.experts` (:func:`plot_experts`: against the
number of experts), :mod:`~coordcheck.plot.steplines` (the line-per-step panels of the guide, depth and experts
figures: the steps shown, their styles, zeros and missing values marked, a minimum y span) and
:mod:`~coordcheck.plot.helpers` (sizes, theme, legends, checks, captions, :func:`save_figure`). Input: a tidy frame
(:mod:`coordcheck.core.frame`), a slopes table (:mod:`coordcheck.judge.slopes`) or the verdict's evidence table.
Output: a matplotlib Figure, and, when a path is given, the same figure as ``<path>.pdf`` and
``<path>.png`` written atomically next to each other. The public names are re-exported here.
"""

from __future__ import annotations

from coordcheck.plot.causes import (
    DRAWN_COLUMNS, INSIDE_LABEL, MEASURE_ORDER, MEASURE_TITLES, NO_EVIDENCE, NO_SLOPE, OUTSIDE_LABEL, STATUS_WORDS,
    VIOLATES_COLOUR, VIOLATES_LABEL, marks, measure_order, plot_causes,
)
from coordcheck.plot.coords import (
    FAIL_COLOUR, HIGHLIGHT_COLOURS, HIGHLIGHT_LAYERS, HIGHLIGHT_MARKS, HIGHLIGHT_WIDTH, KINDS, LAYER_CMAP,
    LAYER_CMAP_RANGE, MAX_COLUMNS, MAX_GUIDE_COLUMNS, MAX_LAYER_LEGEND, MAX_MODULE_LEGEND, NOT_JUDGED_FACE, ROLE_STYLE,
    Layout, activation_kind, guide_kinds, highlight_style, plot_coords,
)
from coordcheck.plot.steplines import (
    MAX_STEP_LINES, MIN_Y_SPAN, NA_TICK, STEP_CMAP, STEP_CMAP_RANGE, STEP_MARKERS, ZERO_TICK, StepStyle, chosen_steps,
    step_styles,
)
from coordcheck.plot.experts import PANELS as EXPERTS_PANELS, has_experts, plot_experts
from coordcheck.plot.depth import (
    DEPTH_KINDS, GRID_SERIES, MAX_DEPTH_COLUMNS, depth_kinds, family_labels, has_depths, has_grid, plot_depth,
    plot_grid_slopes,
)
from coordcheck.plot.helpers import (
    CAPTION_GID, FIGURE_WIDTH, PNG_DPI, SIZES, SLIDE_HEIGHT, WIDTH_PALETTE, Size, add_caption, add_legend,
    add_legend_below, caption_of, check_columns, check_one_config, check_steps, default_steps, facet_size,
    figure_style, fit_log2_labels, fit_titles, font_pt, label_log2, label_log_y, legend_line, log2_labels,
    module_order, nothing_left, pick_steps, plain_number, powers_of_two, save_figure, seaborn_modules, tensor_rank,
)
from coordcheck.plot.loss import plot_loss
from coordcheck.plot.slopes import (
    MAX_ANNOTATED, MAX_ANNOTATED_ACROSS, MAX_STACKED_MODULES, MIN_LABEL_PT, SLOPE_CLIP, SLOPE_CMAP, plot_slopes,
)

__all__ = [
    # the figures
    "plot_coords", "plot_slopes", "plot_loss", "plot_causes", "plot_depth", "plot_grid_slopes", "activation_kind",
    "guide_kinds", "highlight_style",
    "plot_experts", "has_experts", "EXPERTS_PANELS",
    # depth
    "DEPTH_KINDS", "GRID_SERIES", "MAX_DEPTH_COLUMNS", "depth_kinds", "family_labels", "has_depths", "has_grid",
    # coords
    "Layout", "KINDS", "ROLE_STYLE", "HIGHLIGHT_COLOURS", "HIGHLIGHT_WIDTH", "HIGHLIGHT_MARKS", "HIGHLIGHT_LAYERS",
    "NOT_JUDGED_FACE", "LAYER_CMAP",
    "LAYER_CMAP_RANGE", "MAX_COLUMNS", "MAX_MODULE_LEGEND", "MAX_LAYER_LEGEND", "MAX_GUIDE_COLUMNS", "FAIL_COLOUR",
    # steplines: the lines of the guide, depth and experts figures
    "STEP_CMAP", "STEP_CMAP_RANGE", "STEP_MARKERS", "MAX_STEP_LINES", "MIN_Y_SPAN", "ZERO_TICK", "NA_TICK", "StepStyle",
    "chosen_steps", "step_styles",
    # causes
    "DRAWN_COLUMNS", "MEASURE_ORDER", "MEASURE_TITLES", "VIOLATES_COLOUR", "VIOLATES_LABEL", "INSIDE_LABEL",
    "OUTSIDE_LABEL", "STATUS_WORDS", "marks",
    "NO_EVIDENCE", "NO_SLOPE", "measure_order",
    # slopes
    "SLOPE_CMAP", "SLOPE_CLIP", "MAX_STACKED_MODULES", "MAX_ANNOTATED", "MAX_ANNOTATED_ACROSS", "MIN_LABEL_PT",
    # helpers
    "Size", "SIZES", "FIGURE_WIDTH", "SLIDE_HEIGHT", "WIDTH_PALETTE", "PNG_DPI", "CAPTION_GID", "add_caption",
    "caption_of", "seaborn_modules", "figure_style",
    "facet_size", "module_order", "legend_line", "add_legend", "add_legend_below", "font_pt", "tensor_rank",
    "check_columns", "check_one_config", "nothing_left", "save_figure", "default_steps", "pick_steps", "check_steps",
    "label_log_y", "plain_number", "label_log2", "log2_labels", "powers_of_two", "fit_log2_labels", "fit_titles",
]
