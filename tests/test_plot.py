import itertools
import struct
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

from coordcheck.core.frame import COLUMNS, LOSS_MODULE, FrameError, conform
from coordcheck.plot import (
    DRAWN_COLUMNS, HIGHLIGHT_WIDTH, INSIDE_LABEL, NO_EVIDENCE, NO_SLOPE, VIOLATES_COLOUR, VIOLATES_LABEL,
    activation_kind, caption_of, plot_causes, plot_coords, plot_loss, plot_slopes,
)
from coordcheck.judge.slopes import fit_slopes

WIDTHS = (64, 128, 256)
SEEDS = (0, 1)
MODULES = [  # (module, layer_index, role)
    ("wte", 0, "input"),
    ("blocks.0.attn", 1, "attention"),
    ("blocks.0.mlp", 1, "hidden"),
    ("blocks.1.mlp", 2, "hidden"),
    ("lm_head", 3, "output"),
]
STAT_SCALE = {"std": 1.0, "l1": 0.8, "rms": 1.0, "mean": -0.01, "absmax": 3.0}  # mean < 0 on purpose
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# seaborn 0.13's heatmap calls a colormap method that matplotlib 3.11 plans to deprecate
pytestmark = pytest.mark.filterwarnings("ignore:The set_bad function:PendingDeprecationWarning")


def _exponent(parametrization, role, step):
    """Known width exponent: muP is flat; SP grows like sqrt(width) after the first update."""
    return 0.5 if parametrization == "sp" and role != "input" and step > 0 else 0.0


def tidy(widths=WIDTHS, seeds=SEEDS, steps=range(4), parametrizations=("mup", "sp"), modules=MODULES,
         lr=0.01):
    """A tidy frame with known values: (1 + layer_index) * width**exponent * (1 + seed / 10),
    delta = out * step / 10 (0 at step 0), and loss rows that fall faster for narrow models."""
    rows = []
    for par, w, seed, step in itertools.product(parametrizations, widths, seeds, steps):
        config = {"config_id": f"{par}-{lr}", "model": "gpt", "parametrization": par, "optimizer": "adam",
                  "lr": lr, "data": "tokens", "data_policy": "fixed", "width": w, "seed": seed, "step": step}
        for (module, layer, role), tensor, (stat, scale) in itertools.product(
                modules, ("out", "delta"), STAT_SCALE.items()):
            out = (1 + layer) * w ** _exponent(par, role, step) * (1 + seed / 10)
            value = out * (step / 10 if tensor == "delta" else 1.0) * scale
            rows.append({**config, "module": module, "layer_index": layer, "role": role,
                         "call_order": [m[0] for m in modules].index(module), "tensor": tensor, "stat": stat,
                         "value": value})
        rows.append({**config, "module": LOSS_MODULE, "layer_index": -1, "role": "loss", "call_order": -1,
                     "tensor": "loss", "stat": "value", "value": 5 * np.exp(-step / (2 + w / 64)) + 0.1 * seed})
    return conform(pd.DataFrame(rows, columns=list(COLUMNS)))


def _png_size_in(path, dpi=200):
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width / dpi, height / dpi


def _steps_shown(fig, n_cols):
    return [ax.get_title() for ax in fig.axes[:n_cols]]


GPT_MODULES = [  # a transformer: the guide layout shows every kind of activation
    ("wte", 0, "input"),
    ("h.0.ln_1", 1, "norm"),
    ("h.0.attn.scores", 1, "attention"),
    ("h.0.attn.c_proj", 1, "hidden"),
    ("h.0.mlp.c_fc", 1, "hidden"),
    ("h.0.mlp.c_proj", 2, "hidden"),
    ("h.0", 2, "hidden"),  # a block output: neither attention nor MLP, left out
    ("ln_f", 3, "norm"),
    ("head.pre", 3, "output"),  # runs before lm_head: not the model's output
    ("lm_head", 4, "output"),
]
GUIDE_KINDS = ["embedding", "attention logits", "attention output", "MLP output", "output logits"]
GUIDE_MODULES = {"embedding": ["wte"], "attention logits": ["h.0.attn.scores"], "attention output": ["h.0.attn.c_proj"],
                 "MLP output": ["h.0.mlp.c_proj"], "output logits": ["lm_head"]}  # a sub-block: its last module


def sixty_modules():
    """60 modules over 5 roles, with the long dotted names of a real checkpoint."""
    modules = [("model.embed_tokens", 0, "input"), ("model.embed_positions", 0, "input")]
    for i in range(14):
        modules += [(f"model.layers.{i}.input_layernorm", i + 1, "norm"),
                    (f"model.layers.{i}.self_attn.scores", i + 1, "attention"),
                    (f"model.layers.{i}.self_attn.o_proj", i + 1, "hidden"),
                    (f"model.layers.{i}.mlp.down_proj", i + 1, "hidden")]
    return modules + [("model.norm", 15, "norm"), ("lm_head", 15, "output")]


def _overlapping_tick_labels(fig):
    """Pairs of visible, non-empty tick labels anywhere in the figure whose boxes intersect."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for ax in fig.axes
             for t in [*ax.get_xticklabels(), *ax.get_yticklabels()] if t.get_visible() and t.get_text()]
    assert boxes
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]


def _visible_labels(labels):
    return [t.get_text() for t in labels if t.get_visible() and t.get_text()]


def _assert_title_above_panels(fig, title):
    assert fig.get_suptitle() == title
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (suptitle,) = [t for t in fig.texts if t.get_text() == title]
    box = suptitle.get_window_extent(renderer)
    for ax in fig.axes:  # panels with their titles and tick labels
        assert not box.overlaps(ax.get_tightbbox(renderer)), ax.get_title()


# --- plot_coords ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["coord_check.png", "run.v2"])
def test_coords_writes_pdf_and_png_and_nothing_else(tmp_path, name):
    plot_coords(tidy(parametrizations=("mup",)), tmp_path / "figs" / name)
    stem = name.removesuffix(".png").removesuffix(".pdf")
    written = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert written == [f"{stem}.pdf", f"{stem}.png"]  # no temp files left behind
    assert (tmp_path / "figs" / f"{stem}.pdf").read_bytes().startswith(b"%PDF")
    png = (tmp_path / "figs" / f"{stem}.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000


def test_coords_axes_show_real_widths_on_log_axes():
    frame = tidy()
    before = frame.copy()
    fig = plot_coords(frame, layout="grid")
    pd.testing.assert_frame_equal(frame, before)  # the caller's frame is left alone
    assert len(fig.axes) == 2 * 4  # rows mup, sp; columns steps 0..3
    for ax in fig.axes:
        assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
        np.testing.assert_array_equal(ax.get_xticks(), WIDTHS)
        assert ax.get_yscale() == "log"
    for ax in fig.axes[-4:]:  # the bottom row carries the (shared) tick labels
        assert [t.get_text() for t in ax.get_xticklabels()] == ["64", "128", "256"]
    assert _steps_shown(fig, 4) == ["step 0", "step 1", "step 2", "step 3"]
    assert fig.axes[0].get_ylabel() == "mup\nstd of out"  # the row is named in the y label
    assert fig.axes[-1].get_xlabel() == "width"


def test_coords_lines_are_seed_geometric_means_one_per_module():
    frame = tidy(parametrizations=("sp",))
    fig = plot_coords(frame, steps=[2], layout="grid")
    (ax,) = fig.axes
    sel = frame[(frame.tensor == "out") & (frame.stat == "std") & (frame.step == 2)]
    expected = (sel.assign(log=np.log(sel.value)).groupby(["layer_index", "module", "width"])["log"]
                .mean().pipe(np.exp).unstack("width"))  # rows by depth then name, as the lines
    assert len(ax.lines) == len(MODULES)
    for line, (_, want) in zip(ax.lines, expected.iterrows()):
        np.testing.assert_allclose(line.get_xdata(), WIDTHS)
        np.testing.assert_allclose(line.get_ydata(), want.to_numpy(), rtol=1e-9)
    colours = [line.get_color() for line in ax.lines]
    assert colours[1] == colours[2] != colours[0]  # same layer index, same colour
    modules, band = fig.legends  # the modules, then what the shaded band is
    assert [t.get_text() for t in modules.get_texts()][0] == "0: wte"
    assert [t.get_text() for t in band.get_texts()] == ["band: min–max\nover 2 seeds"]


def test_default_steps_are_spread_and_keep_first_and_last():
    fig = plot_coords(tidy(steps=range(11), parametrizations=("mup",), seeds=(0,)), layout="grid")
    shown = _steps_shown(fig, len(fig.axes))
    assert len(shown) == 4 and shown[0] == "step 0" and shown[-1] == "step 10"
    fig = plot_coords(tidy(parametrizations=("mup",)), steps=[0, 3], layout="grid")
    assert _steps_shown(fig, len(fig.axes)) == ["step 0", "step 3"]
    with pytest.raises(ValueError, match="not recorded"):
        plot_coords(tidy(), steps=[7], layout="grid")


def test_zero_nan_and_inf_values_leave_panels_empty_not_crash(tmp_path):
    frame = tidy(parametrizations=("mup",))  # delta is exactly 0 at step 0
    frame.loc[(frame.step == 1) & (frame.module == "wte"), "value"] = np.nan
    frame.loc[(frame.step == 2) & (frame.module == "lm_head") & (frame.width == 256), "value"] = np.inf
    fig = plot_coords(frame, tmp_path / "delta", tensor="delta", layout="grid")
    step0, step1, step2, _ = fig.axes
    assert not step0.lines and "no values > 0" in [t.get_text() for t in step0.texts]
    assert len(step1.lines) == len(MODULES) - 1  # wte has no finite value at step 1
    assert len(step2.lines[-1].get_xdata()) == len(WIDTHS) - 1  # lm_head stops before 256
    frame["value"] = 0.0
    fig = plot_coords(frame, tmp_path / "zero", layout="grid")
    assert all(not ax.lines for ax in fig.axes)
    assert (tmp_path / "zero.png").stat().st_size > 0


def test_mean_is_drawn_as_magnitude():
    fig = plot_coords(tidy(parametrizations=("mup",)), stat="mean", steps=[0], layout="grid")
    (ax,) = fig.axes
    assert len(ax.lines) == len(MODULES) and ax.get_ylabel() == "|mean| of out"
    assert all((line.get_ydata() > 0).all() for line in ax.lines)


def test_row_tensor_shows_every_tensor_with_its_label():
    fig = plot_coords(tidy(parametrizations=("sp",)), row="tensor", steps=[1, 3], layout="grid")
    assert len(fig.axes) == 2 * 2
    assert [ax.get_ylabel() for ax in fig.axes[::2]] == ["std of out", "std of delta"]
    with pytest.raises(ValueError, match="varying: parametrization"):
        plot_coords(tidy(), row="tensor", layout="grid")  # mup and sp would be averaged together


def test_several_configs_per_panel_are_refused():
    frame = pd.concat([tidy(lr=0.01), tidy(lr=0.1)], ignore_index=True)
    with pytest.raises(ValueError, match="varying: lr"):
        plot_coords(frame, layout="grid")
    with pytest.raises(ValueError, match="varying: lr"):
        plot_loss(frame)
    fig = plot_coords(frame[frame.parametrization == "mup"], row="lr", steps=[0], layout="grid")
    assert len(fig.axes) == 2


def test_bad_arguments_say_what_is_there():
    with pytest.raises(ValueError, match="present: stats"):
        plot_coords(tidy(), stat="median", layout="grid")
    with pytest.raises(ValueError, match="not a column"):
        plot_coords(tidy(), row="colour", layout="grid")


def test_many_modules_get_a_legend_by_layer_index():
    modules = [(f"blocks.{i}.{part}", i + 1, "hidden") for i in range(12) for part in ("attn", "mlp")]
    fig = plot_coords(tidy(modules=modules, parametrizations=("mup",), seeds=(0,)), steps=[0], layout="grid")
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert legend.get_title().get_text() == "layer index"
    assert labels[0] == "1" and labels[-1] == "12" and len(labels) <= 9


@pytest.mark.parametrize("layout", ["guide", "grid"])
@pytest.mark.parametrize("size, width_in", [("paper", (6.0, 7.8)), ("slides", (10.5, 12.8))])
def test_sizes_fit_a_page_or_a_slide(tmp_path, size, width_in, layout):
    plot_coords(tidy(steps=range(2)), tmp_path / "c", size=size, layout=layout)
    width, height = _png_size_in(tmp_path / "c.png")
    assert width_in[0] <= width <= width_in[1] and height < width


def test_roles_get_their_own_marker_and_dashes():
    fig = plot_coords(tidy(parametrizations=("mup",)), steps=[1], layout="grid")
    (ax,) = fig.axes
    markers = [line.get_marker() for line in ax.lines]  # lines by depth then name, as MODULES
    roles = [role for _, _, role in MODULES]
    assert len(set(markers)) == len(set(roles)) == 4  # input, attention, hidden, output
    assert markers[2] == markers[3] and roles[2] == roles[3] == "hidden"
    assert ax.lines[1].get_linestyle() != ax.lines[2].get_linestyle()  # attention dashed, hidden solid


def test_highlighted_modules_are_thick_on_top_and_in_their_own_legend():
    frame = tidy(parametrizations=("sp",))
    fig = plot_coords(frame, steps=[2], highlight=["blocks.1.mlp", "not.a.module"], layout="grid")
    (ax,) = fig.axes
    assert len(ax.lines) == len(MODULES)
    thick = [line for line in ax.lines if line.get_linewidth() == HIGHLIGHT_WIDTH]
    assert len(thick) == 1 and thick[0].get_zorder() > max(line.get_zorder() for line in ax.lines if line not in thick)
    sel = frame[(frame.tensor == "out") & (frame.stat == "std") & (frame.step == 2) & (frame.module == "blocks.1.mlp")]
    np.testing.assert_allclose(thick[0].get_ydata(), np.exp(np.log(sel.value).groupby(sel.width).mean()), rtol=1e-9)
    legends = {lg.get_title().get_text(): [t.get_text() for t in lg.get_texts()] for lg in fig.legends}
    assert legends["highlighted modules"] == ["L2 blocks.1.mlp"]  # names not in the frame are ignored
    assert "2: blocks.1.mlp" not in legends["layer index: module"]


def test_highlighted_modules_with_the_same_values_both_show():
    """Two routers' softmax with equal values (a MoE run's layers 1 and 2): the one drawn first is wider, with a larger
    open marker, so the one drawn over it leaves its edges and marker showing; marker and dashes differ too."""
    routers = [("blocks.0.router.(softmax)", 1, "attention"), ("blocks.1.router.(softmax)", 2, "attention")]
    modules = [*MODULES[:3], *routers, *MODULES[3:]]
    frame = tidy(modules=modules, parametrizations=("sp",))
    first, second = (frame.module == "blocks.0.router.(softmax)"), (frame.module == "blocks.1.router.(softmax)")
    frame.loc[second, "value"] = frame.loc[first, "value"].to_numpy()
    picked = ["blocks.0.router.(softmax)", "blocks.1.router.(softmax)"]
    fig = plot_coords(frame, steps=[2], highlight=picked, layout="grid")
    (ax,) = fig.axes
    under, over = [line for line in ax.lines if line.get_zorder() >= 3]
    np.testing.assert_allclose(under.get_ydata(), over.get_ydata())  # the same values, one line over the other
    assert over.get_zorder() > under.get_zorder()
    assert under.get_linewidth() > over.get_linewidth() == HIGHLIGHT_WIDTH
    assert under.get_markersize() > over.get_markersize()
    assert under.get_marker() != over.get_marker() and under.get_linestyle() != over.get_linestyle()
    assert all(line.get_markerfacecolor() == "none" for line in (under, over))  # open: the one below shows through
    legends = {lg.get_title().get_text(): lg for lg in fig.legends}
    handles = legends["highlighted modules"].legend_handles
    assert [h.get_marker() for h in handles] == [under.get_marker(), over.get_marker()]


def test_sixty_modules_grid_has_role_legend_and_no_overlapping_labels():
    frame = tidy(modules=sixty_modules(), steps=range(11), seeds=(0,))
    fig = plot_coords(frame, highlight=["lm_head", "model.layers.9.self_attn.scores", "model.layers.3.mlp.down_proj"],
                      title="muP coordinate check — FAIL", layout="grid")
    assert all(len(ax.lines) == 60 for ax in fig.axes)
    legends = {lg.get_title().get_text(): [t.get_text() for t in lg.get_texts()] for lg in fig.legends}
    assert legends["role"] == ["input", "hidden", "attention", "norm", "output"]
    assert len(legends["layer index"]) <= 9 and len(legends["highlighted modules"]) == 3
    assert _overlapping_tick_labels(fig) == []
    assert _visible_labels(fig.axes[-1].get_xticklabels()) == ["64", "128", "256"]  # every width still named
    assert len(_visible_labels(fig.axes[0].get_yticklabels())) >= 2  # and a scale on y
    _assert_title_above_panels(fig, "muP coordinate check — FAIL")


@pytest.mark.parametrize("size", ["paper", "slides"])
def test_many_widths_are_thinned_not_overlapping(size):
    widths = tuple(2**k for k in range(5, 15))  # 32 .. 16384
    fig = plot_coords(tidy(widths=widths, seeds=(0,), parametrizations=("mup",)), size=size, layout="grid")
    assert _overlapping_tick_labels(fig) == []
    shown = _visible_labels(fig.axes[-1].get_xticklabels())
    assert shown[-1] in ("16384", "$2^{14}$") and 3 <= len(shown) <= len(widths)


@pytest.mark.parametrize("widths, as_powers", [((128, 256, 512, 1024), True), ((96, 192, 384, 768), False)])
def test_guide_labels_every_width_of_a_default_sweep(widths, as_powers):
    """Five panels on a page: the 512 of 128-1024 is labelled (as 2^9: the numbers do not fit), and widths that are
    not powers of two keep their numbers."""
    fig = plot_coords(tidy(modules=GPT_MODULES, widths=widths, seeds=(0,), parametrizations=("mup", "sp")))
    assert len(fig.axes) == 2 * 5
    assert _overlapping_tick_labels(fig) == []
    shown = _visible_labels(fig.axes[-1].get_xticklabels())
    if as_powers:
        assert shown == [f"$2^{{{k}}}$" for k in range(7, 11)]
    else:
        assert all(t.isdigit() for t in shown) and shown[-1] == "768"  # as written (thinned if they must be)


# --- plot_coords, layout="guide" ------------------------------------------------------


@pytest.mark.parametrize("module, role, kind", [
    ("model.layers.3.self_attn.o_proj", "hidden", "attention output"),
    ("transformer.h.3.attn.c_attn", "hidden", "attention output"),
    ("layers.3.attention.wo", "hidden", "attention output"),
    ("model.layers.3.mlp.down_proj", "hidden", "MLP output"),
    ("layers.3.feed_forward.w2", "hidden", "MLP output"),
    ("blocks.3.ffn.fc1", "hidden", "MLP output"),
    ("blocks.3.conv_fc2", "hidden", "MLP output"),
    ("blocks.3", "hidden", "hidden"),
    ("blocks.3.effc", "hidden", "hidden"),  # parts are matched whole, not as substrings
    ("layers.3.w12", "hidden", "hidden"),
    ("wte", "input", "embedding"),
    ("h.0.attn.scores", "attention", "attention logits"),
    ("blocks.0.attn.(softmax)", "attention", "attention logits"),
    ("lm_head", "output", "output logits"),
    ("model.layers.3.mlp_norm", "norm", None),
    (LOSS_MODULE, "loss", None),
])
def test_activation_kind(module, role, kind):
    assert activation_kind(module, role) == kind


def test_guide_has_one_panel_per_kind_in_order_and_one_line_per_step():
    frame = tidy(modules=GPT_MODULES, parametrizations=("sp",), steps=range(5))
    fig = plot_coords(frame, layout="guide")
    assert [ax.get_title() for ax in fig.axes] == GUIDE_KINDS
    for ax in fig.axes:
        assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2 and ax.get_yscale() == "log"
        np.testing.assert_array_equal(ax.get_xticks(), WIDTHS)
        assert len(ax.lines) == 4  # the chosen steps 0, 1, 2 and the last, 4
        colours = [matplotlib.colors.to_hex(line.get_color()) for line in ax.lines]
        assert len(set(colours)) == 4  # colour and marker differ between steps
        assert len({line.get_marker() for line in ax.lines}) == 4
    steps, reading = fig.legends  # the steps, then how to read the panels
    assert [t.get_text() for t in steps.get_texts()] == ["step 0 (init)", "step 1", "step 2", "step 4"]
    assert [t.get_text() for t in reading.get_texts()] == ["band: min–max over 2 seeds"]
    assert fig.get_supylabel() == "std of activations (log scale)"  # every panel labelled, once
    assert fig.axes[-1].get_xlabel() == "width" and not fig.get_suptitle()
    assert _visible_labels(fig.axes[-1].get_xticklabels())[-1] == "256"


def test_guide_lines_are_geometric_means_over_modules_then_seeds():
    frame = tidy(modules=GPT_MODULES, parametrizations=("sp",), seeds=(0, 1, 2))
    sel = frame[(frame.tensor == "out") & (frame.stat == "std")]
    sel = sel.assign(value=sel.value * (1 + sel.call_order))  # modules of one kind differ
    frame.loc[sel.index, "value"] = sel.value
    fig = plot_coords(frame, layout="guide", steps=[1, 3])
    for ax, kind in zip(fig.axes, GUIDE_KINDS):
        rows = sel[sel.module.isin(GUIDE_MODULES[kind])]
        pooled = np.log(rows.value).groupby([rows.step, rows.width, rows.seed]).mean()  # modules
        want = pooled.groupby(["step", "width"]).mean().pipe(np.exp)  # then seeds, in log space
        for line, step in zip(ax.lines, [1, 3]):
            np.testing.assert_allclose(line.get_xdata(), WIDTHS)
            np.testing.assert_allclose(line.get_ydata(), want.loc[step].to_numpy(), rtol=1e-9)


def test_guide_of_an_mlp_has_embedding_hidden_and_output_panels():
    modules = [("input.fc", 0, "input"), ("blocks.0.fc", 1, "hidden"), ("blocks.0.act", 1, "hidden"),
               ("blocks.1", 2, "hidden"), ("readout", 3, "output")]
    frame = tidy(modules=modules, parametrizations=("mup", "sp"))
    fig = plot_coords(frame, layout="guide", steps=[0, 2])
    assert len(fig.axes) == 2 * 3  # rows mup, sp
    assert [ax.get_title() for ax in fig.axes[:3]] == ["embedding", "hidden", "output logits"]
    assert [t.get_text() for t in fig.texts if t.get_rotation() == 270] == ["mup", "sp"]  # each row named at its right
    assert fig.get_supylabel() == "std of activations (log scale)"
    hidden = fig.axes[1]  # every hidden module, fc layers included: 2 * 2 * 3, geometric mean 6**(1/3)
    np.testing.assert_allclose(hidden.lines[0].get_ydata(), np.exp(np.log([2, 2, 3]).mean()) * np.exp(
        np.log([1.0, 1.1]).mean()), rtol=1e-9)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["step 0 (init)", "step 2"]


def test_guide_defaults_to_the_chosen_steps_0_1_2_5_and_the_last():
    fig = plot_coords(tidy(modules=GPT_MODULES, parametrizations=("mup",), seeds=(0,), steps=range(8)), layout="guide")
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["step 0 (init)", "step 1", "step 2", "step 5",
                                                                  "step 7"]
    assert len(fig.legends) == 1  # one seed: no band to explain
    fig = plot_coords(tidy(modules=GPT_MODULES, parametrizations=("mup",), seeds=(0,), steps=range(30)),
                      layout="guide")
    shown = [t.get_text() for t in fig.legends[0].get_texts()]
    assert shown == ["step 0 (init)", "step 1", "step 2", "step 5", "step 20", "step 29"]  # at most six


@pytest.mark.parametrize("parametrizations", [("mup",), ("mup", "sp")])
def test_guide_sixty_modules_has_no_overlapping_labels_or_titles(tmp_path, parametrizations):
    frame = tidy(modules=sixty_modules(), steps=range(11), seeds=(0,), parametrizations=parametrizations)
    fig = plot_coords(frame, tmp_path / "guide", layout="guide", title="muP coordinate check — FAIL")
    assert [ax.get_title() for ax in fig.axes[:5]] == GUIDE_KINDS
    assert _overlapping_tick_labels(fig) == []
    renderer = fig.canvas.get_renderer()
    titles = [ax.title.get_window_extent(renderer) for ax in fig.axes[:5]]
    assert not any(a.overlaps(b) for a, b in itertools.combinations(titles, 2))
    _assert_title_above_panels(fig, "muP coordinate check — FAIL")
    assert (tmp_path / "guide.png").read_bytes().startswith(PNG_MAGIC)


def test_guide_refuses_frames_without_any_kind():
    with pytest.raises(ValueError, match="layout='grid'"):
        plot_coords(tidy(modules=[("ln", 0, "norm")], parametrizations=("mup",)), layout="guide")
    with pytest.raises(ValueError, match="layout must be"):
        plot_coords(tidy(), layout="heatmap")


# --- plot_slopes ---------------------------------------------------------------------


def test_slopes_heatmap_prints_known_slopes_and_blanks_nan(tmp_path):
    slopes = fit_slopes(tidy())  # delta is 0 at step 0 everywhere: NaN slopes there
    assert slopes.loc[(slopes.tensor == "delta") & (slopes.step == 0), "slope"].isna().all()
    fig = plot_slopes(slopes, tmp_path / "slopes")
    assert (tmp_path / "slopes.png").read_bytes().startswith(PNG_MAGIC)
    *panels, colourbar = fig.axes
    assert [ax.get_title() for ax in panels] == ["mup · out", "mup · delta", "sp · out", "sp · delta"]
    assert [t.get_text() for t in panels[0].get_yticklabels()] == [
        "L0 wte", "L1 blocks.0.attn", "L1 blocks.0.mlp", "L2 blocks.1.mlp", "L3 lm_head"]
    assert "clipped" in colourbar.get_ylabel()
    mup_out, mup_delta, sp_out, _ = ([t.get_text() for t in ax.texts] for ax in panels)
    assert mup_out == ["0.00"] * len(MODULES) * 4  # flat in width
    assert len(mup_delta) == len(MODULES) * 3  # step 0 is NaN: blank, not annotated
    assert panels[1].collections[0].get_array().mask.sum() == len(MODULES)
    assert sp_out.count("0.50") == (len(MODULES) - 1) * 3  # all but the embedding, after step 0


def test_slopes_one_tensor_and_many_cells_are_not_annotated():
    slopes = fit_slopes(tidy(steps=range(40), parametrizations=("sp",), seeds=(0,)))
    fig = plot_slopes(slopes, tensor="out", stat="l1")
    *panels, _ = fig.axes
    assert [ax.get_title() for ax in panels] == ["sp · out"] and not panels[0].texts


def test_slopes_all_nan_does_not_crash(tmp_path):
    slopes = fit_slopes(tidy(parametrizations=("mup",))).assign(slope=np.nan)
    plot_slopes(slopes, tmp_path / "nan")
    assert (tmp_path / "nan.pdf").stat().st_size > 0


@pytest.mark.parametrize("size", ["paper", "slides"])
def test_slopes_sixty_long_module_names_never_overlap(size):
    slopes = fit_slopes(tidy(modules=sixty_modules(), steps=range(11), seeds=(0,)))
    fig = plot_slopes(slopes, size=size, title="muP coordinate check — FAIL")
    *panels, _ = fig.axes
    assert len(panels) == 4  # mup/sp x out/delta, side by side
    assert _overlapping_tick_labels(fig) == []
    names = _visible_labels(panels[0].get_yticklabels())
    assert len(names) == 60 and "L10 model.layers.9.self_attn.o_proj" in names  # every module named
    assert len(_visible_labels(panels[0].get_xticklabels())) >= 3
    _assert_title_above_panels(fig, "muP coordinate check — FAIL")


def test_slopes_too_many_modules_for_the_page_shrink_then_thin():
    modules = [(f"model.layers.{i}.mlp.down_proj", i, "hidden") for i in range(200)]
    fig = plot_slopes(fit_slopes(tidy(modules=modules, parametrizations=("sp",), seeds=(0,))), tensor="out")
    panel, _ = fig.axes
    assert _overlapping_tick_labels(fig) == []
    shown = _visible_labels(panel.get_yticklabels())
    assert 20 < len(shown) < 200 and shown[0] == "L0 model.layers.0.mlp.down_proj"


# --- plot_loss -----------------------------------------------------------------------


def test_loss_has_one_line_per_width_and_real_widths_in_the_legend(tmp_path):
    fig = plot_loss(tidy(), tmp_path / "loss")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loss.pdf", "loss.png"]
    assert [ax.get_title() for ax in fig.axes] == ["mup", "sp"]
    for ax in fig.axes:
        assert len(ax.lines) == len(WIDTHS)
        np.testing.assert_allclose(ax.lines[0].get_xdata(), [0, 1, 2, 3])
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["64", "128", "256"]


def test_loss_drops_nonfinite_values():
    frame = tidy(parametrizations=("sp",))
    diverged = (frame.tensor == "loss") & (frame.width == 256) & (frame.step >= 2)
    frame.loc[diverged, "value"] = np.inf
    frame.loc[(frame.tensor == "loss") & (frame.width == 128), "value"] = np.nan
    fig = plot_loss(frame)
    (ax,) = fig.axes
    assert len(ax.lines) == 2  # 128 has nothing finite left
    np.testing.assert_allclose(ax.lines[-1].get_xdata(), [0, 1])  # 256 ends where it diverged


# --- import hygiene ------------------------------------------------------------------


def test_plot_module_does_not_import_torch():
    code = ("import sys, coordcheck.plot, coordcheck.plot.causes; from coordcheck.plot import plot_causes; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_slopes_hatched_window_is_labelled_once_under_all_panels():
    fig = plot_slopes(fit_slopes(tidy(steps=range(6))), window_end={"sp": 2})
    assert fig.get_supxlabel() == "step (hatched: after the loss turned unstable, not judged)"
    assert {ax.get_xlabel() for ax in fig.axes[:-1]} == {""}  # none under a panel: they would run into each other
    assert plot_slopes(fit_slopes(tidy())).get_supxlabel() == "step"


# --- plot_causes ---------------------------------------------------------------------

# (name, order, {measure: (exponent, expected_low, expected_high)}): a muP GPT whose block 1 MLP
# down-projection kept an unscaled learning rate, listed out of call order on purpose
CAUSES_MODEL = [
    ("lm_head", 5, {"init": (-1.0, -np.inf, 0.1), "lr": (-1.0, -1.1, -0.9), "own": (0.02, -0.1, 0.1)}),
    ("h.0.mlp.c_fc", 1, {"init": (0.01, -0.1, 0.1), "lr": (-1.0, -1.1, -0.9), "own": (-0.03, -0.1, 0.1)}),
    ("wte", 0, {"init": (0.0, -0.1, 0.1), "lr": (0.0, -0.1, 0.1), "own": (0.01, -0.1, 0.1)}),
    ("h.1.mlp.c_proj", 4, {"init": (0.03, -0.1, 0.1), "lr": (0.0, -1.1, -0.9), "own": (1.02, -0.1, 0.1)}),
    ("h.0.mlp.c_proj", 2, {"init": (-0.02, -0.1, 0.1), "lr": (-1.0, -1.1, -0.9), "own": (0.0, -0.1, 0.1)}),
    ("ln_f", 3, {"init": (0.0, -0.1, 0.1), "own": (0.04, -0.1, 0.1)}),  # a norm: no width-scaled lr
]
CI = 0.05


def evidence(parametrizations=("mup",), model=CAUSES_MODEL):
    """An evidence table in the contract's columns (Verdict.evidence): violates = interval outside the band."""
    rows = []
    for par in parametrizations:
        for name, order, measures in model:
            for measure, (exponent, low, high) in measures.items():
                rows.append({"config_id": f"{par}-1", "parametrization": par, "name": name, "measure": measure,
                             "exponent": exponent, "ci_low": exponent - CI, "ci_high": exponent + CI,
                             "expected_low": low, "expected_high": high,
                             "violates": exponent - CI > high or exponent + CI < low, "order": order,
                             "step": 0 if measure == "init" else 3})  # a column the figure does not read
    return pd.DataFrame(rows)


def _errorbars(ax, label):
    """(x, y) of the points of the error bars labelled ``label`` in ``ax``."""
    points = [c.lines[0].get_xydata() for c in ax.containers
              if isinstance(c, ErrorbarContainer) and c.get_label() == label]
    return np.concatenate(points) if points else np.empty((0, 2))


def test_causes_has_a_row_per_name_in_call_order_and_a_column_per_measure(tmp_path):
    fig = plot_causes(evidence(), tmp_path / "causes", title="coordinate check (parametrization=mup) — FAIL")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["causes.pdf", "causes.png"]
    assert [ax.get_title() for ax in fig.axes] == ["initialisation", "learning rate", "own update"]
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["wte", "h.0.mlp.c_fc", "h.0.mlp.c_proj", "ln_f", "h.1.mlp.c_proj", "lm_head"]
    assert fig.axes[0].get_ylim()[0] > fig.axes[0].get_ylim()[1]  # first in call order on top
    own = fig.axes[2]
    drawn = np.concatenate([_errorbars(own, label) for label in (INSIDE_LABEL, VIOLATES_LABEL)])
    rows = evidence().query("measure == 'own'").assign(y=lambda d: d["name"].map(labels.index))
    assert sorted(map(tuple, drawn)) == sorted(zip(rows["exponent"], rows["y"].astype(float)))
    assert fig.get_suptitle() == "coordinate check (parametrization=mup) — FAIL"


def test_causes_marks_exactly_the_violators():
    ev = evidence()
    fig = plot_causes(ev)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    red = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_color() == VIOLATES_COLOUR]
    assert red == ["h.1.mlp.c_proj"]  # the planted parameter, nothing upstream of it
    for ax, measure in zip(fig.axes, ["init", "lr", "own"]):
        bad = ev[(ev["measure"] == measure) & ev["violates"]]
        want = sorted(zip(bad["exponent"], bad["name"].map(labels.index).astype(float)))
        assert sorted(map(tuple, _errorbars(ax, VIOLATES_LABEL))) == want, measure
        numbers = [t.get_text() for t in ax.texts]
        assert numbers == [f"{x:+.2f}" for x in bad["exponent"]]
    assert [t.get_text() for t in fig.axes[2].texts] == ["+1.02"]
    (legend,) = fig.legends
    assert VIOLATES_LABEL in [t.get_text() for t in legend.get_texts()]


def test_causes_shades_the_band_and_runs_an_infinite_edge_to_the_panel_edge():
    fig = plot_causes(evidence())
    init = fig.axes[0]
    labels = [t.get_text() for t in init.get_yticklabels()]
    bands = {round(p.get_y() + p.get_height() / 2): p for p in init.patches}
    assert sorted(bands) == list(range(len(labels)))
    c_fc = bands[labels.index("h.0.mlp.c_fc")]
    np.testing.assert_allclose([c_fc.get_x(), c_fc.get_x() + c_fc.get_width()], [-0.1, 0.1])
    readout = bands[labels.index("lm_head")]  # (-inf, 0.1]: may shrink at init
    assert readout.get_x() < init.get_xlim()[0] and readout.get_x() + readout.get_width() == pytest.approx(0.1)
    lr = fig.axes[1]  # ln_f has no lr: its row stays empty there
    assert labels.index("ln_f") not in {round(p.get_y() + p.get_height() / 2) for p in lr.patches}


def test_causes_stacks_parametrizations_and_reads_measures_it_does_not_know():
    ev = evidence(("sp", "mup"))
    extra = ev[ev["measure"] == "own"].assign(measure="audit:lr")
    fig = plot_causes(pd.concat([ev, extra]))
    assert [ax.get_title() for ax in fig.axes] == [f"{p} · {m}" for p in ("mup", "sp")
                                                   for m in ("initialisation", "learning rate", "own update",
                                                             "audit:lr")]


def test_causes_refuses_what_it_cannot_draw():
    with pytest.raises(ValueError, match="no evidence to draw") as empty:
        plot_causes(pd.DataFrame(columns=DRAWN_COLUMNS))
    assert str(empty.value) == NO_EVIDENCE and "\n" not in NO_EVIDENCE
    with pytest.raises(FrameError, match=r"missing columns \['expected_low', 'expected_high'\]"):
        plot_causes(evidence().drop(columns=["expected_low", "expected_high"]))
    two = pd.concat([evidence(), evidence().assign(config_id="mup-2")])
    with pytest.raises(ValueError, match="several configurations per parametrization"):
        plot_causes(two)


def test_causes_leaves_out_what_was_not_measured():
    ev = evidence()
    ev.loc[ev["name"] == "wte", ["exponent", "ci_low", "ci_high"]] = np.nan  # too few widths to fit
    ev.loc[ev["name"] == "ln_f", ["expected_low", "expected_high"]] = np.nan  # not judged: no band
    fig = plot_causes(ev)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[0] == "wte"  # the row is kept, its point is not drawn, "no slope" is written instead
    for ax in fig.axes:
        assert [t.get_position()[1] for t in ax.texts if t.get_text() == NO_SLOPE] == [0]  # in wte's row
    ys = {y for label in (INSIDE_LABEL, VIOLATES_LABEL) for y in _errorbars(fig.axes[0], label)[:, 1]}
    assert 0.0 not in ys and len(ys) == len(labels) - 1
    assert labels.index("ln_f") not in {round(p.get_y() + p.get_height() / 2) for p in fig.axes[0].patches}


# --- the causes figure in the report and the API -------------------------------------


def test_report_writes_the_causes_figure_only_when_the_verdict_has_evidence(tmp_path):
    from coordcheck.report import build_report, write_report

    report = build_report(tidy(parametrizations=("mup",)))
    assert report.verdict.evidence.empty
    write_report(report, tmp_path / "without")
    assert not list((tmp_path / "without").glob("causes.*"))
    report.verdict.evidence = evidence()
    md = write_report(report, tmp_path / "with").read_text()
    assert sorted(p.name for p in (tmp_path / "with").glob("causes.*")) == ["causes.pdf", "causes.png"]
    assert "](causes.png)" in md and report.figures["causes (png)"] == "causes.png"


def test_result_plot_kind_causes_draws_the_verdicts_evidence():
    from coordcheck.app.api import CoordCheckResult
    from coordcheck.core.errors import CoordCheckError

    result = CoordCheckResult(tidy(parametrizations=("mup",)))
    with pytest.raises(ValueError, match="no evidence to draw"):
        result.plot(kind="causes")
    result.verdict.evidence = evidence()
    fig = result.plot(kind="causes")
    assert not fig.get_suptitle() and caption_of(fig) == result.verdict.caption  # the verdict under it, not above
    assert [ax.get_title() for ax in fig.axes] == ["initialisation", "learning rate", "own update"]
    assert result.plot().axes[0].get_title() == "embedding"  # kind="coords" in the guide layout stays the default
    with pytest.raises(CoordCheckError, match="kind must be one of coords, causes"):
        result.plot(kind="cause")
