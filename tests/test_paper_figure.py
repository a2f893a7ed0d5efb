"""The paper figure (issue 39): chosen steps in a palette that survives grayscale, a y range that never makes a flat
line a trend, zeros and missing values shown as such, the band explained, one- and two-column sizes, fonts embedded,
the verdict in the caption, the failing panels marked, and the causes figure's markers agreeing with its bands."""

import shutil
import subprocess

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb
from matplotlib.collections import PathCollection
from matplotlib.container import ErrorbarContainer

from coordcheck.plot import (
    FAIL_COLOUR, FIGURE_WIDTH, INSIDE_LABEL, MIN_Y_SPAN, NA_TICK, OUTSIDE_LABEL, VIOLATES_LABEL, ZERO_TICK,
    caption_of, chosen_steps, marks, plot_causes, plot_coords, step_styles,
)

from test_plot import GPT_MODULES, _png_size_in, tidy


def _lightness(colour) -> float:
    r, g, b = to_rgb(colour)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b  # what a grayscale print keeps


def _tick_labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_yticklabels()]


@pytest.mark.parametrize("recorded, judged, include, want", [
    (range(11), None, (), [0, 1, 2, 5, 10]),
    (range(4), None, (), [0, 1, 2, 3]),
    (range(30), None, (), [0, 1, 2, 5, 20, 29]),  # at most six: the first three, the last, the others spread
    (range(11), 2, (), [0, 1, 2, 10]),  # the judged window, then the last recorded step (drawn as not judged)
    (range(11), None, (7,), [0, 1, 2, 5, 7, 10]),  # the verdict's worst step is always shown
    ([0, 4, 9, 19], None, (), [0, 4, 9, 19]),  # each the nearest recorded step
])
def test_chosen_steps_are_0_1_2_5_then_the_last(recorded, judged, include, want):
    assert chosen_steps(recorded, judged, include) == want


def test_step_styles_differ_in_lightness_and_marker_so_grayscale_keeps_them_apart():
    styles = step_styles([0, 1, 2, 5, 10, 20])
    light = [_lightness(s.colour) for s in styles.values()]
    assert all(a > b + 0.05 for a, b in zip(light, light[1:]))  # early light, late dark, each step its own grey
    assert len({s.marker for s in styles.values()}) == len(styles)  # and its own marker
    assert styles[0].open and styles[0].dashes and styles[0].label == "step 0 (init)"
    late = step_styles([0, 1, 10], judged_until=1)
    assert late[10].label == "step 10 (not judged)" and late[10].dashes


def test_a_flat_line_keeps_a_y_range_that_does_not_make_it_a_trend():
    frame = tidy(modules=GPT_MODULES, parametrizations=("mup",), seeds=(0,))
    on = frame["tensor"] == "out"
    frame.loc[on, "value"] = 1.0 + 0.01 * np.log2(frame.loc[on, "width"] / 64)  # rises by 2% over the widths
    fig = plot_coords(frame, layout="guide")
    for ax in fig.axes:
        lo, hi = ax.get_ylim()
        assert hi / lo >= MIN_Y_SPAN  # 2% is a sliver of the axis, not its height
        assert len([label for label in _tick_labels(ax) if label]) >= 2  # and the axis still has a scale


def test_zeros_sit_in_a_row_labelled_0_and_missing_values_in_one_labelled_na():
    frame = tidy(modules=GPT_MODULES, parametrizations=("mup",), steps=range(3))
    logits = (frame["module"] == "lm_head") & (frame["tensor"] == "out")
    frame.loc[logits & (frame["step"] == 0), "value"] = 0.0  # a zero-initialised readout
    scores = (frame["module"] == "h.0.attn.scores") & (frame["tensor"] == "out") & (frame["width"] == 256)
    frame.loc[scores & (frame["step"] == 2), "value"] = np.nan  # diverged at one width
    fig = plot_coords(frame, layout="guide")
    panels = {ax.get_title(): ax for ax in fig.axes}
    out, attn = panels["output logits"], panels["attention logits"]
    assert ZERO_TICK in _tick_labels(out) and NA_TICK not in _tick_labels(out)
    assert NA_TICK in _tick_labels(attn) and ZERO_TICK not in _tick_labels(attn)
    zeros = [c for c in out.collections
             if isinstance(c, PathCollection) and c.get_offsets()[0][1] < out.get_ylim()[0] * 2]
    assert len(zeros) == 3  # step 0 at each width, at the floor
    assert len(out.lines) == 2  # steps 1 and 2; step 0 is only its marks, no line drawn through the floor
    reading = [t.get_text() for t in fig.legends[1].get_texts()]
    assert reading == ["band: min–max over 2 seeds", "at 0: exactly 0", "at n/a: missing or not finite"]


@pytest.mark.parametrize("size", ["paper", "column"])
def test_one_and_two_column_sizes_with_every_font_embedded(tmp_path, size):
    fig = plot_coords(tidy(modules=GPT_MODULES, parametrizations=("mup",)), tmp_path / "fig", size=size,
                      caption="Coordinate check — PASS: every judged series is flat.")
    width, _ = _png_size_in(tmp_path / "fig.png")
    assert FIGURE_WIDTH[size] * 0.85 <= width <= FIGURE_WIDTH[size] * 1.1
    if size == "column":  # five kinds on a 3.4 in column: two panels a line, on three lines
        assert len({round(ax.get_position().y0, 3) for ax in fig.axes if ax.get_visible()}) == 3
    pdf = (tmp_path / "fig.pdf").read_bytes()
    assert b"/FontFile2" in pdf and b"/Type3" not in pdf  # TrueType, embedded: what publishers ask for
    assert caption_of(fig) == "Coordinate check — PASS: every judged series is flat."
    if shutil.which("pdffonts"):  # poppler's own word, where it is installed
        rows = subprocess.run(["pdffonts", str(tmp_path / "fig.pdf")], capture_output=True, text=True,
                              check=True).stdout.splitlines()[2:]
        assert rows and all(row.split()[-5] == "yes" for row in rows), rows  # the "emb" column


def test_the_failing_panel_is_framed_in_red_with_its_slope_and_step():
    frame = tidy(modules=GPT_MODULES, parametrizations=("sp",))
    failing = pd.DataFrame({"module": ["h.0.mlp.c_proj"], "tensor": ["out"], "step": [3], "slope": [0.5]})
    fig = plot_coords(frame, layout="guide", failing=failing)
    red = [ax for ax in fig.axes if to_rgb(ax.spines["top"].get_edgecolor()) == to_rgb(FAIL_COLOUR)]
    assert [ax.get_title() for ax in red] == ["MLP output"]
    assert [t.get_text() for t in red[0].texts] == ["slope +0.50, step 3"]
    assert "red frame: a module fails here" in [t.get_text() for t in fig.legends[1].get_texts()]


def _points(fig, label):
    return sum(len(c.lines[0].get_xdata()) for ax in fig.axes for c in ax.containers
               if isinstance(c, ErrorbarContainer) and c.get_label() == label)


def test_the_causes_markers_agree_with_their_bands():
    """The head's own update at +0.95 beside a 1/width multiplier applied outside it: outside its band, not failed
    (not judged): an open diamond with the word, never the dot that means "within the band"."""
    ev = pd.DataFrame([
        {"name": "h.0.mlp.c_fc", "measure": "own", "exponent": 0.02, "expected_low": -0.2, "expected_high": 0.2,
         "violates": False, "status": "pass"},
        {"name": "lm_head", "measure": "own", "exponent": 0.95, "expected_low": -0.2, "expected_high": 0.2,
         "violates": False, "status": "skip"},
        {"name": "h.1.mlp.c_fc", "measure": "own", "exponent": 0.9, "expected_low": -0.2, "expected_high": 0.2,
         "violates": True, "status": "fail"},
    ]).assign(config_id="a", parametrization="mup", ci_low=lambda d: d.exponent - 0.05,
              ci_high=lambda d: d.exponent + 0.05, order=range(3))
    assert list(marks(ev)) == ["inside", "outside", "violates"]
    fig = plot_causes(ev)
    assert (_points(fig, INSIDE_LABEL), _points(fig, OUTSIDE_LABEL), _points(fig, VIOLATES_LABEL)) == (1, 1, 1)
    assert "not judged" in [t.get_text() for t in fig.axes[0].texts]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[:3] == [INSIDE_LABEL, VIOLATES_LABEL, f"{OUTSIDE_LABEL}\n(why: the word beside it)"]


def test_embedding_the_fonts_logs_nothing(tmp_path, caplog):
    """fontTools logs each table it subsets at INFO: under Hydra's logging that was 237 lines at the end of a sweep."""
    import logging

    with caplog.at_level(logging.INFO):
        plot_coords(tidy(modules=GPT_MODULES, parametrizations=("mup",)), tmp_path / "fig")
    assert not [r for r in caplog.records if r.name.startswith("fontTools")]
    assert b"/FontFile2" in (tmp_path / "fig.pdf").read_bytes()
