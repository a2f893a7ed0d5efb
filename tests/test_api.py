"""The Python API (``coordcheck.app.api``): ``coord_check(build, widths)`` and the :class:`CoordCheckResult` it
returns."""

import pytest
import torch
from cli_builders import build_no_width, capped
from synthetic import make_frame
from test_verdict import HEALTHY
from torch import nn

from coordcheck import CoordCheckResult, coord_check
from coordcheck.setup.data import gaussian
from coordcheck.core.errors import CoordCheckError
from coordcheck.setup.models import gpt, mlp
from coordcheck.judge.verdict import Rules, judge

TINY = dict(steps=1, seeds=1, progress=False)


@pytest.mark.parametrize("bad,match", [
    (dict(widths=[]), "non-empty"), (dict(widths=[0, 8]), "positive"), (dict(steps=0), "steps must be"),
    (dict(seeds=0), "seeds must be"), (dict(parametrization="mu"), "unknown parametrization"),
    (dict(optimizer="lion"), "unknown optimizer"), (dict(data="imagenet"), "unknown data"),
    (dict(widths=16), "widths must be a non-empty list of positive integers, got 16"),
    (dict(widths="16,32"), "widths must be a non-empty list"), (dict(loss="mse"), "loss must be a callable"),
    (dict(device="tpu"), "device must be"), (dict(precision="fp8"), "precision must be one of"),
    (dict(compile=True), "compile=true is not supported"),
])
def test_api_bad_input(bad, match):
    kwargs = dict(widths=[8, 16], steps=1, seeds=1, progress=False) | bad
    with pytest.raises(CoordCheckError, match=match) as e:
        coord_check(mlp, **kwargs)
    assert "\n" not in str(e.value)


def test_a_builder_of_its_own_gets_data_read_off_its_first_layer():
    def plain(width):
        return nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2))

    r = coord_check(plain, [8], parametrization="none", **TINY)
    assert r.frame["data"].iloc[0] == "gaussian" and r.facts[0]["width"] == 8

    def recurrent(width):
        return nn.Sequential(nn.GRU(4, width), nn.Linear(width, 2))

    with pytest.raises(CoordCheckError, match="first layer '0' is a GRU, which coordcheck cannot read inputs off: "
                                              "pass data="):
        coord_check(recurrent, [8], parametrization="none", **TINY)


def test_widths_are_sorted_and_unique_one_fact_each():
    r = coord_check(mlp, [32, 16, 32], **TINY)
    assert sorted(r.frame["width"].unique()) == [16, 32] and [f["width"] for f in r.facts] == [16, 32]
    assert r.facts[0]["n_params"] < r.facts[1]["n_params"]


def test_each_builtin_model_gets_its_own_data_and_the_run_is_named():
    m = coord_check(mlp, [16], lr=0.05, **TINY).frame
    assert set(m["data"]) == {"gaussian"} and set(m["model"]) == {"mlp"} and set(m["lr"]) == {0.05}
    assert set(m["optimizer"]) == {"adam"} and set(m["parametrization"]) == {"mup"}
    g = coord_check(gpt, [16], n_layer=1, context=8, **TINY).frame
    assert set(g["data"]) == {"tokens"} and set(g["model"]) == {"gpt"}
    t = coord_check(gpt, [16], data="text", n_layer=1, **TINY).frame
    assert set(t["data"]) == {"text"}


def test_config_id_names_the_configuration_not_the_run():
    a = coord_check(mlp, [16], **TINY).frame["config_id"].unique()
    b = coord_check(mlp, [16, 32], **TINY).frame["config_id"].unique()  # another width: the same configuration
    c = coord_check(mlp, [16], lr=0.02, **TINY).frame["config_id"].unique()
    d = coord_check(mlp, [16], depth=3, **TINY).frame["config_id"].unique()  # a builder argument
    assert len(a) == 1 and list(a) == list(b) and a[0] != c[0] and a[0] != d[0] and c[0] != d[0]


def test_a_pair_of_tensors_is_custom_data():
    x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    frame = coord_check(mlp, [16], data=(x, y), **TINY).frame
    assert set(frame["data"]) == {"custom"} and set(frame["data_policy"]) == {"fixed"}


def test_a_builder_that_ignores_width_fails_in_process():
    r = coord_check(build_no_width, [64, 128, 256], data=gaussian(dim=16), steps=3, seeds=1, progress=False)
    assert judge(r.frame).status == "pass"  # flat everywhere: on its slopes alone it would pass (issue 20)
    assert r.verdict.status == "fail" and not r.passed
    assert r.verdict.reason == ("the builder ignores `width`: every width (64, 128, 256) built the same 1930-parameter "
                                "model — make build(width=...) set the layer sizes")
    assert "**Verdict: FAIL**" in r.report() and "parameters by width: 64: 1930, 128: 1930 (same model as 64)" \
        in r.report()


def test_a_builder_capped_at_some_width_fails_naming_the_widths():
    r = coord_check(capped, [16, 32, 64], data="gaussian", **TINY)
    assert r.verdict.status == "fail"
    assert r.verdict.reason.startswith(f"widths 32 and 64 built the same {r.facts[1]['n_params']}-parameter model: "
                                       "the builder ignores `width` there — make build(width=...) set the layer "
                                       "sizes at every width")
    assert r.facts[0]["n_params"] < r.facts[1]["n_params"] == r.facts[2]["n_params"]


# -- CoordCheckResult: the verdict, report and figure of a frame -----------------------------------------------------
def test_result_of_a_healthy_frame_passes():
    r = CoordCheckResult(make_frame(HEALTHY))
    assert r.passed and r.verdict.status == "pass" and r.rules == Rules()
    assert {"module", "tensor", "slope", "ci_low", "ci_high", "n_widths"} <= set(r.slopes.columns)
    assert r.report().startswith("# muP coordinate check\n\n**Verdict: PASS**")


def test_result_rules_decide_the_verdict():
    frame = make_frame({**HEALTHY, ("h1", "hidden", "out"): 0.15})
    assert CoordCheckResult(frame).passed
    strict = CoordCheckResult(frame, rules=Rules(tol=0.1))
    assert strict.verdict.status == "fail" and "h1" in strict.verdict.reason
    assert "**Verdict: FAIL**" in strict.report()


@pytest.mark.parametrize("layout", ["grid", "guide"])
def test_result_plot_writes_pdf_and_png_captioned_with_the_verdict(tmp_path, layout):
    from coordcheck.plot import caption_of

    r = CoordCheckResult(make_frame(HEALTHY))
    fig = r.plot(tmp_path / "coord_check", layout=layout)
    assert (tmp_path / "coord_check.png").read_bytes()[:4] == b"\x89PNG"
    pdf = (tmp_path / "coord_check.pdf").read_bytes()
    assert pdf[:4] == b"%PDF" and b"/FontFile2" in pdf and b"/Type3" not in pdf  # TrueType fonts, embedded
    assert not fig.get_suptitle() and caption_of(fig) == r.verdict.caption  # the verdict under the figure
    assert r.verdict.caption.startswith("Coordinate check (parametrization=mup) — PASS: ")
