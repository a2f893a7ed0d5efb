"""Diagnoses (coordcheck.gradflow.checks): models whose gradient-flow answer is known, and the exit code."""

import functools
import math

import pytest
import torch
from torch import nn

from coordcheck.setup.data import gaussian, tokens
from coordcheck.gradflow import BLOCKING, Diagnosis, GradFlowProbe, exit_code, gradflow_once, notes, probe_training
from coordcheck.setup.models import gpt, mlp

from .gradflow_models import DeepMLP
from .helpers import BATCH, found, loop, mup_model, stat


def test_frozen_layer_is_flagged_only_when_learning():
    model = DeepMLP(32)
    model.blocks[1].fc.weight.requires_grad_(False)
    frame = gradflow_once(model, BATCH, optimizer=torch.optim.Adam(model.parameters()))
    d = found(frame)
    assert list(d) == ["frozen_parameter"] and d["frozen_parameter"].names == ("blocks.1.fc.weight",)
    assert d["frozen_parameter"].severity == "warning"
    assert found(frame, learning=False) == {}


def test_layer_left_out_of_the_optimizer():
    model = DeepMLP(32)
    opt = torch.optim.Adam([p for n, p in model.named_parameters() if not n.startswith("blocks.1.")])
    d = found(gradflow_once(model, BATCH, optimizer=opt))
    assert list(d) == ["not_in_optimizer"] and d["not_in_optimizer"].severity == "error"
    assert d["not_in_optimizer"].names == ("blocks.1.fc.weight", "blocks.1.fc.bias")


def test_detached_intermediate_is_a_broken_graph_not_vanishing():
    frame = gradflow_once(DeepMLP(32, detach_at=2), BATCH)
    d = found(frame)
    assert list(d) == ["broken_graph"]
    cut = {f"{m}.fc.{p}" for m in ("input", "blocks.0", "blocks.1") for p in ("weight", "bias")}
    assert set(d["broken_graph"].names) == cut and d["broken_graph"].names[0] == "blocks.1.fc.weight"
    assert "blocks.1.fc" in d["broken_graph"].message  # the cut is just after it
    assert stat(frame, "input.fc.weight", "grad_is_none") == 1
    assert stat(frame, "blocks.2.fc.weight", "grad_is_none") == 0


@pytest.mark.parametrize("how", ["forward under no_grad", "loss re-wrapped"])
def test_loss_cut_from_the_model_means_no_gradients(how):
    if how == "forward under no_grad":
        frame = gradflow_once(DeepMLP(32, no_grad=True), BATCH)
    else:
        model = DeepMLP(32)
        with GradFlowProbe(model) as probe:
            loss = nn.functional.cross_entropy(model(BATCH.inputs), BATCH.targets)
            loss = torch.tensor(loss.item(), requires_grad=True)  # the bug: a new leaf
            loss.backward()
            frame = probe.step(loss=loss)
    d = found(frame)
    assert list(d) == ["no_gradients"] and "input.fc.weight" in d["no_gradients"].names


def test_deep_tanh_with_too_large_init_saturates_from_the_first_layer():
    frame = gradflow_once(DeepMLP(64, depth=12, activation="tanh", init_scale=3.0), BATCH)
    d = found(frame)
    # std 3/sqrt(fan_in) is tanh's chaotic phase: ~35% of outputs saturate, and the weight gradients
    # *grow* toward the input (~1.35x per layer, 1.3 decades over 11 layers: below the 2-decade bar)
    assert list(d) == ["saturation"]
    assert d["saturation"].names[:2] == ("input.act", "blocks.0.act") and len(d["saturation"].names) == 12


def test_deep_sigmoid_gradients_vanish_toward_the_input():
    d = found(gradflow_once(DeepMLP(64, depth=12, activation="sigmoid", init_scale=1.0), BATCH))
    assert list(d) == ["vanishing_gradients"]
    names = d["vanishing_gradients"].names
    assert names[0] == "blocks.0.fc.weight" and "blocks.10.fc.weight" not in names  # early layers only


@pytest.mark.parametrize("activation", ["relu", "linear"])
def test_deep_mlp_with_too_large_init_blows_up(activation):
    frame = gradflow_once(DeepMLP(64, depth=12, activation=activation, init_scale=3.0), BATCH)
    d = found(frame)
    assert list(d) == ["activation_blowup"] and "blocks.10.fc" in d["activation_blowup"].names
    assert "init is too large" in d["activation_blowup"].message


def test_dead_relu_layer_and_unused_module():
    model = DeepMLP(32, dead=1)
    model.spare = nn.Linear(4, 4)  # never called in forward
    d = found(gradflow_once(model, BATCH))
    assert list(d) == ["dead_layer"]
    assert {"blocks.1.fc.weight", "blocks.0.fc.weight", "input.fc.weight", "spare.weight"} <= set(d["dead_layer"].names)
    assert "blocks.2.fc.bias" not in d["dead_layer"].names  # above the dead layer: gradient flows
    assert "blocks.1.act output only zeros" in d["dead_layer"].message


def test_nan_in_one_gradient_is_named():
    model = DeepMLP(32)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)

    def inject(m):
        m.blocks[1].fc.weight.grad[0, 0] = math.nan

    with GradFlowProbe(model, opt) as probe:
        loop(model, opt, probe, 1, before_step=inject)
    d = found(probe.frame)
    assert list(d) == ["nonfinite_gradients"] and d["nonfinite_gradients"].names == ("blocks.1.fc.weight",)
    assert stat(probe.frame, "blocks.1.fc.weight", "nonfinite") == 1


def test_nan_in_backward_names_the_first_parameter_in_backward_order():
    model = DeepMLP(32)
    # NaN enters the backward at blocks.2's output: blocks.2 and everything below it turn NaN
    def poison(module, inputs, out):
        out.register_hook(lambda g: g * math.nan)

    model.blocks[2].register_forward_hook(poison)
    frame = gradflow_once(model, BATCH)
    d = found(frame)["nonfinite_gradients"]
    assert d.severity == "error" and d.names[0].startswith("blocks.2.fc.")
    below = ("input", "blocks.0", "blocks.1", "blocks.2")
    assert set(d.names) == {f"{m}.fc.{p}" for m in below for p in ("weight", "bias")}
    assert f"first in backward order (where the NaN/inf appeared) is {d.names[0]}" in d.message


def test_gradients_accumulated_without_zeroing_are_stale():
    model = DeepMLP(32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with GradFlowProbe(model, opt) as probe:
        loop(model, opt, probe, 2, zero=False)
    d = found(probe.frame)
    assert list(d) == ["stale_gradients"] and d["stale_gradients"].steps == (1,)
    assert "blocks.1.fc.weight" in d["stale_gradients"].names
    assert math.isnan(stat(probe.frame, "input.fc.weight", "stale", step=0))  # first step: unknown


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zeroed_gradients_are_not_stale(set_to_none):
    model = DeepMLP(32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with GradFlowProbe(model, opt) as probe:
        loop(model, opt, probe, 3, set_to_none=set_to_none)
    assert found(probe.frame) == {}
    assert (probe.frame.query("stat == 'stale' and step > 0")["value"] == 0).all()


@pytest.mark.parametrize("n_layer", [2, 6])
def test_healthy_mup_gpt_has_no_diagnosis(n_layer):
    model, opt = mup_model(functools.partial(gpt, n_layer=n_layer, context=32), 64)
    frame = probe_training(model, tokens(), optimizer=opt, steps=3)
    assert found(frame) == {}
    assert any("lm_head.weight" in n and n.startswith("step 0") for n in notes(frame))  # zero readout at init
    assert frame.query("kind == 'activation'")["layer_index"].max() == n_layer + 1


def test_healthy_mup_mlp_has_no_diagnosis():
    model, opt = mup_model(mlp, 128)
    frame = probe_training(model, gaussian(), optimizer=opt, steps=3)
    assert found(frame) == {}
    assert stat(frame, "blocks.0.fc.weight", "grad_norm", step=2) > 0


def test_exit_code_blocks_on_errors_only():
    warn = Diagnosis("saturation", "warning", "m", "f")
    err = Diagnosis("dead_layer", "error", "m", "f")
    assert exit_code([]) == 0 and exit_code([warn]) == 0 and exit_code([warn, err]) == 1
    assert {"no_gradients", "broken_graph", "nonfinite_gradients", "not_in_optimizer", "dead_layer"} <= set(BLOCKING)
