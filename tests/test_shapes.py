"""Parameter shapes per width (``coordcheck.record.shapes``): a builder that does not use ``width`` is named, never
passed."""

import pytest
from cli_builders import build_no_width, capped, deeper

from coordcheck.setup.models import gpt, mlp
from coordcheck.record.shapes import fingerprint, model_table, n_params, param_shapes, shapes_by_config, width_problem


def _built(build, widths, **kwargs):
    return {w: param_shapes(build(width=w, **kwargs)) for w in widths}


def test_param_shapes_are_the_models_own_and_count_like_numel():
    model = gpt(32, n_layer=1, n_head=2)
    shapes = param_shapes(model)
    assert shapes["lm_head.weight"] == [256, 32] and list(shapes) == [n for n, _ in model.named_parameters()]
    assert n_params(shapes) == sum(p.numel() for p in model.parameters())


def test_fingerprint_tells_every_name_and_dim_apart():
    a = {"fc.weight": [32, 16], "fc.bias": [32]}
    assert fingerprint(a) == fingerprint(dict(reversed(a.items())))  # the order of registration does not matter
    assert fingerprint(a) != fingerprint({"fc.weight": [16, 32], "fc.bias": [32]})  # same count, other shape
    assert fingerprint(a) != fingerprint({"fc2.weight": [32, 16], "fc.bias": [32]})


def test_a_builder_that_ignores_width_is_named_with_its_parameter_count():
    built = _built(build_no_width, [64, 128, 256])
    assert width_problem(built) == (
        "the builder ignores `width`: every width (64, 128, 256) built the same 1930-parameter model — make "
        "build(width=...) set the layer sizes")


def test_a_builder_capped_at_some_width_names_the_widths_that_built_the_same_model():
    problem = width_problem(_built(capped, [16, 32, 64, 128]))
    n = n_params(param_shapes(capped(width=32)))
    assert problem == (f"widths 32, 64 and 128 built the same {n}-parameter model: the builder ignores `width` "
                       f"there — make build(width=...) set the layer sizes at every width")


def test_a_builder_that_reads_width_as_depth_does_not_grow():
    built = _built(deeper, [16, 32, 64])
    assert len({fingerprint(s) for s in built.values()}) == 3  # three different models ...
    problem = width_problem(built)  # ... none of them wider
    assert problem.startswith("no parameter grows with width: from width 16 to 64 the model goes from "
                              f"{n_params(built[16])} to {n_params(built[64])} parameters")
    assert "not the number of layers" in problem


@pytest.mark.parametrize("build,kwargs", [(mlp, {}), (gpt, {"n_layer": 1, "n_head": 2})])
def test_models_that_grow_with_width_have_no_problem(build, kwargs):
    assert width_problem(_built(build, [16, 32, 64], **kwargs)) is None


def test_one_width_has_nothing_to_compare():
    assert width_problem(_built(build_no_width, [64])) is None and width_problem({}) is None


def test_facts_are_grouped_by_configuration_and_width_without_shapes_left_out():
    facts = [{"config_id": "a", "width": 16, "shapes": {"w": [16]}},
             {"config_id": "a", "width": 16, "shapes": {"w": [16]}, "lr": 0.1},  # another lr, the same model
             {"config_id": "a", "width": 32, "shapes": {"w": [32]}},
             {"config_id": "b", "width": 16, "n_params": 16},  # written before shapes were recorded
             {"status": "ok"}]
    assert shapes_by_config(facts) == {"a": {16: {"w": [16]}, 32: {"w": [32]}}}
    table = model_table(facts)
    assert table[["config_id", "width", "n_params"]].values.tolist() == [["a", 16, 16], ["a", 32, 32]]
    assert table["fingerprint"].nunique() == 2
