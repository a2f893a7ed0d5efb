"""The depth figures (coordcheck.plot.depth) on synthetic depth sweeps with known slopes, and on a real tiny one."""

import itertools
import json

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
from matplotlib.patches import Rectangle

from coordcheck.core.frame import COLUMNS, LOSS_MODULE, conform
from coordcheck.judge.places import RESIDUAL, match_places
from coordcheck.plot import (
    DEPTH_KINDS, GRID_SERIES, caption_of, depth_kinds, family_labels, has_depths, has_grid, plot_depth,
    plot_grid_slopes,
)

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.filterwarnings("ignore:The set_bad function:PendingDeprecationWarning")]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DEPTHS = (2, 4, 8, 16)
SEEDS = (0, 1)
STEPS = (0, 1, 2, 3)


def _modules(depth):
    """A pre-LN GPT's recorded modules as (module, layer_index, role, place kind), in call order."""
    mods = [("wte", 0, "input", "embedding")]
    for i in range(depth):
        mods += [(f"blocks.{i}.ln_1", i + 1, "norm", None),
                 (f"blocks.{i}.attn.scores", i + 1, "attention", "attention logits"),
                 (f"blocks.{i}.attn.c_proj", i + 1, "hidden", "attention output"),
                 (f"blocks.{i}.mlp.c_fc", i + 1, "hidden", None),
                 (f"blocks.{i}.mlp.c_proj", i + 1, "hidden", "MLP output"),
                 (f"blocks.{i}", i + 1, "hidden", "block")]
    return mods + [("ln_f", depth + 1, "norm", "final norm"), ("lm_head", depth + 1, "output", "output logits")]


def sweep(families=None, widths=(64,), depths=DEPTHS, seeds=SEEDS, steps=STEPS, noise=0.0):
    """A tidy depth sweep with known exponents: ``families[name][kind] = (width exponent, depth exponent)``, value
    = 2 * width**a * depth**b * (1 + seed / 10) * exp(noise * N(0, 1)); the residual stream is the last block's
    output (kind "block" at its last index); delta = out * step / 10; the loss grows like depth**(depth exponent of
    kind "loss")."""
    families = families or {"flat": {}}
    rng = np.random.default_rng(0)
    rows = []
    for (fam, expo), w, d, seed, step in itertools.product(families.items(), widths, depths, seeds, steps):
        ident = {"config_id": f"{fam}-{d}", "family_id": fam, "model": "gpt", "parametrization": "mup",
                 "optimizer": "adam", "lr": 0.01, "data": "tokens", "data_policy": "fixed", "width": w, "depth": d,
                 "seed": seed, "step": step}
        for order, (module, layer, role, kind) in enumerate(_modules(d)):
            key = "residual" if module == f"blocks.{d - 1}" else kind
            a, b = expo.get(key, (0.0, 0.0))
            out = 2.0 * w**a * d**b * (1 + seed / 10) * float(np.exp(noise * rng.standard_normal()))
            for tensor in ("out", "delta"):
                if tensor == "delta" and step == 0:
                    continue
                value = out * (step / 10 if tensor == "delta" else 1.0)
                rows.append({**ident, "module": module, "layer_index": layer, "role": role, "call_order": order,
                             "head_dim": 0, "tensor": tensor, "stat": "std", "value": value})
        loss = 5.0 * d ** expo.get("loss", (0, 0))[1] * np.exp(-step / 5)
        rows.append({**ident, "module": LOSS_MODULE, "layer_index": -1, "role": "loss", "call_order": -1,
                     "head_dim": 0, "tensor": "loss", "stat": "value", "value": loss})
    return conform(pd.DataFrame(rows, columns=list(COLUMNS)))


def _visible(fig):
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]


def _slope(x, y):
    return np.polyfit(np.log2(np.asarray(x, float)), np.log2(np.asarray(y, float)), 1)[0]


def test_depth_kinds_name_each_place_of_a_gpt():
    places = match_places(sweep())
    kinds = {p: k if isinstance(k, str) else None for p, k in zip(places["place"], depth_kinds(places))}
    assert kinds == {
        LOSS_MODULE: "loss", "wte": "embedding", RESIDUAL: "residual stream", "blocks.*.ln_1": None,
        "blocks.*.attn.scores": "attention logits", "blocks.*.attn.c_proj": "attention output",
        "blocks.*.mlp.c_fc": None, "blocks.*.mlp.c_proj": "MLP output", "blocks.*": None,
        "ln_f": "final norm", "lm_head": "output logits",
    }


def test_plot_depth_has_the_guide_panels_a_line_per_step_and_a_log2_depth_axis():
    frame = sweep({"none": {"residual": (0.0, 0.5)}})
    fig = plot_depth(frame, tensor="out")
    axes = _visible(fig)
    assert [ax.get_title() for ax in axes] == [k for k in DEPTH_KINDS if k != "hidden"]
    for ax in axes:
        assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
        assert list(ax.get_xticks()) == list(DEPTHS)
        assert ax.get_yscale() == "log"
        assert len(ax.lines) == len(STEPS)  # output logits and the rest: out at every step
    residual = axes[1]
    for line in residual.lines:  # each step's line: the seeds' geometric mean, rising like depth^0.5
        x, y = line.get_data()
        assert list(x) == list(DEPTHS)
        assert _slope(x, y) == pytest.approx(0.5, abs=1e-9)
        assert y[0] == pytest.approx(2.0 * 2**0.5 * np.sqrt(1.0 * 1.1), rel=1e-9)
    flat = axes[0]  # the embedding does not move with depth
    assert all(_slope(*line.get_data()) == pytest.approx(0.0, abs=1e-9) for line in flat.lines)


def test_plot_depth_draws_a_block_per_family_and_tensor_with_shared_y_per_kind():
    frame = sweep({"completep": {}, "none": {"residual": (0.0, 1.0)}})
    fig = plot_depth(frame, labels={"completep": "CompleteP", "none": "no depth scaling"})
    axes = _visible(fig)
    per_block = [len([k for k in DEPTH_KINDS if k != "hidden"]), len([k for k in DEPTH_KINDS if k != "hidden"]) - 1]
    assert len(axes) == 2 * sum(per_block)  # out (with loss) and delta (no loss) per family
    assert [t.get_text() for t in fig.texts if t.get_rotation() == 270] == [  # each block named at its right
        "CompleteP · activations", "CompleteP · change since step 0",
        "no depth scaling · activations", "no depth scaling · change since step 0"]
    assert fig.get_suptitle() == "width 64"  # what they share, above
    assert fig.get_supylabel() == "std (log scale)"  # one y label for every panel but the loss, which has its own
    assert [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()] == ["loss", "loss"]
    residual = [ax for ax in axes if ax.get_title() == "residual stream"]
    assert len(residual) == 4 and len({ax.get_ylim() for ax in residual}) == 2  # shared within out, within delta
    delta_lines = [ax for ax in residual if len(ax.lines) == len(STEPS) - 1]  # no delta at step 0
    assert len(delta_lines) == 2


def test_plot_depth_on_a_grid_draws_a_row_per_width_or_the_width_given():
    frame = sweep(widths=(64, 128))
    per_width = len([k for k in DEPTH_KINDS if k != "hidden"])
    assert len(_visible(plot_depth(frame, tensor="out"))) == 2 * per_width
    one = plot_depth(frame, tensor="out", width=128)
    assert len(_visible(one)) == per_width
    with pytest.raises(ValueError, match="width=32 not in the sweep"):
        plot_depth(frame, width=32)


def test_plot_depth_picks_steps_as_the_coords_figure_does():
    frame = sweep(depths=(2, 4), steps=range(21))
    fig = plot_depth(frame, tensor="out")
    assert len(_visible(fig)[0].lines) == 6  # the chosen steps: 0, 1, 2, 5, 10, 20
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["step 0 (init)", "step 1", "step 2", "step 5", "step 10",
                                                          "step 20"]
    fig = plot_depth(frame, tensor="out", steps=[0, 5])
    assert len(_visible(fig)[0].lines) == 2
    with pytest.raises(ValueError, match="not recorded"):
        plot_depth(frame, steps=[99])


def test_a_frame_without_a_depth_sweep_is_refused():
    frame = sweep(depths=(4,))
    assert not has_depths(frame) and not has_grid(frame)
    with pytest.raises(ValueError, match="not a depth sweep"):
        plot_depth(frame)
    with pytest.raises(ValueError, match="not a depth sweep"):
        plot_grid_slopes(frame)
    assert has_depths(sweep()) and not has_grid(sweep())
    with pytest.raises(ValueError, match="not a width x depth grid"):
        plot_grid_slopes(sweep())


def _heatmap(ax):
    """The heatmap's cell values (rows x columns) and column labels."""
    mesh = ax.collections[0]
    values = np.ma.filled(mesh.get_array(), np.nan).reshape(len(ax.get_yticks()), len(ax.get_xticks()))
    return values, [t.get_text() for t in ax.get_xticklabels()], [t.get_text() for t in ax.get_yticklabels()]


def test_grid_heatmaps_hold_the_width_and_depth_slopes_of_a_plain_fit():
    widths = (64, 128, 256)
    frame = sweep({"g": {"residual": (0.3, 0.8), "output logits": (-0.2, 0.1)}}, widths=widths, noise=0.05)
    fig = plot_grid_slopes(frame)
    by_width, by_depth = fig.axes[0], fig.axes[1]
    values_w, columns, rows_w = _heatmap(by_width)
    values_d, columns_d, rows_d = _heatmap(by_depth)
    assert columns == columns_d == ["residual out @ 0", "residual out @ 3", "residual Δ @ 3", "wte Δ @ 3",
                                    "ln_f Δ @ 3", "lm_head out @ 3", "lm_head Δ @ 3"]
    assert rows_w == [str(d) for d in DEPTHS] and rows_d == [str(w) for w in widths]
    places = match_places(frame)
    series = {"residual out @ 0": (RESIDUAL, "out", 0), "residual Δ @ 3": (RESIDUAL, "delta", 3),
              "lm_head out @ 3": ("lm_head", "out", 3), "wte Δ @ 3": ("wte", "delta", 3)}
    for label, (place, tensor, step) in series.items():
        rows = places[(places["place"] == place) & (places["tensor"] == tensor) & (places["step"] == step)
                      & (places["stat"] == "std")]
        j = columns.index(label)
        for i, d in enumerate(DEPTHS):  # width slope at each depth: every (width, seed) point
            at = rows[rows["depth"] == d]
            assert values_w[i, j] == pytest.approx(_slope(at["width"], at["value"]), abs=1e-9)
        for i, w in enumerate(widths):  # depth slope at each width
            at = rows[rows["width"] == w]
            assert values_d[i, j] == pytest.approx(_slope(at["depth"], at["value"]), abs=1e-9)
    j = columns.index("residual Δ @ 3")
    assert np.allclose(values_w[:, j], 0.3, atol=0.1) and np.allclose(values_d[:, j], 0.8, atol=0.1)


def test_grid_marks_what_lies_outside_the_band():
    frame = sweep({"g": {"residual": (0.0, 1.0)}}, widths=(64, 128, 256))
    fig = plot_grid_slopes(frame, series=[("residual stream", "delta", None), ("output logits", "delta", None)])
    by_depth = fig.axes[1]
    values, columns, _ = _heatmap(by_depth)
    assert columns == ["residual Δ @ 3", "lm_head Δ @ 3"]
    bold = [t.get_fontweight() == "bold" for t in by_depth.texts]
    assert bold == [True, False] * 3  # the residual grows like depth^1, outside [-0.35, 0.2]; the readout flat
    boxes = [p for p in by_depth.patches if isinstance(p, Rectangle) and not p.get_fill()]
    assert sorted(round(p.get_x()) for p in boxes) == [0, 0, 0]
    wide = plot_grid_slopes(frame, band=(-2.0, 2.0), series=[("residual stream", "delta", None)])
    assert not any(t.get_fontweight() == "bold" for t in wide.axes[1].texts)


def test_family_labels_name_what_differs_and_the_depth_scaling_from_the_facts():
    frame = sweep({"a": {}, "b": {}})
    facts = [{"config_id": "a-2", "depth_scaling": "completep"}, {"config_id": "b-2", "depth_scaling": "none"}]
    assert family_labels(frame, facts) == {"a": "depth_scaling=completep", "b": "depth_scaling=none"}
    assert family_labels(frame) == {"a": "parametrization=mup (a)", "b": "parametrization=mup (b)"}
    lrs = pd.concat([sweep({"a": {}}), sweep({"b": {}}).assign(lr=0.001)], ignore_index=True)
    assert family_labels(lrs) == {"a": "lr=0.01", "b": "lr=0.001"}


def test_both_figures_save_pdf_and_png(tmp_path):
    frame = sweep(widths=(64, 128), depths=(2, 4), steps=(0, 1))
    for draw, name in ((plot_depth, "depth"), (plot_grid_slopes, "grid")):
        draw(frame, tmp_path / name, **({"tensor": "out", "width": 64} if name == "depth" else {}))
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
        assert (tmp_path / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["depth.pdf", "depth.png", "grid.pdf", "grid.png"]


def test_grid_series_default_covers_what_a_depth_verdict_judges():
    kinds = {(k, t) for k, t, _ in GRID_SERIES}
    assert {("residual stream", "out"), ("residual stream", "delta"), ("output logits", "delta")} <= kinds
    assert (("residual stream", "out", 0)) in GRID_SERIES


@pytest.mark.slow
def test_a_real_tiny_grid_draws_both_figures_and_the_report_lists_them(tmp_path):
    from coordcheck import coord_check
    from coordcheck.core.errors import CoordCheckError
    from coordcheck.setup.models import gpt

    result = coord_check(gpt, widths=[32, 48], depths=[2, 4, 8], steps=2, seeds=1, depth_scaling="completep",
                         progress=False)
    fig = result.plot(tmp_path / "depth", kind="depth", width=32)
    titles = [ax.get_title() for ax in _visible(fig)]
    assert {"embedding", "residual stream", "final norm", "output logits", "loss"} <= set(titles)
    assert all(ax.get_xscale() == "log" for ax in _visible(fig))
    assert "depth_scaling=completep" in fig.get_suptitle()
    assert caption_of(fig) == result.verdict.caption
    grid = result.plot(tmp_path / "grid", kind="grid")
    assert len(grid.axes) == 3  # the pair of heatmaps and the colour bar
    assert {p.name for p in tmp_path.iterdir()} == {"depth.png", "depth.pdf", "grid.png", "grid.pdf"}
    result.write(tmp_path / "report")
    figures = json.loads((tmp_path / "report" / "report.json").read_text())["figures"]
    assert {"coord_check_depth (png)", "slopes_grid (png)"} <= set(figures)
    one_depth = coord_check(gpt, widths=[32], steps=1, seeds=1, progress=False)
    with pytest.raises(CoordCheckError, match="not a depth sweep"):
        one_depth.plot(kind="depth")
