"""The probe's mechanics (coordcheck.gradflow.probe): steps, hooks, cost, no effect on training."""

import pandas as pd
import pytest
import torch
from torch import nn

from coordcheck.gradflow import COLUMNS, GradFlowProbe, gradflow_once

from .gradflow_models import DeepMLP
from .helpers import BATCH, stat


def test_every_k_records_the_right_steps_with_their_forward():
    model = DeepMLP(16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    returned = []
    with GradFlowProbe(model, opt, every=3) as probe:
        for t in range(7):
            opt.zero_grad()
            nn.functional.cross_entropy(model(BATCH.inputs), BATCH.targets).backward()
            returned.append(probe.step(t) is not None)
            opt.step()
    assert returned == [True, False, False, True, False, False, True]
    f = probe.frame
    assert sorted(f["step"].unique()) == [0, 3, 6]
    acts = f[(f["kind"] == "activation") & (f["stat"] == "numel")]
    assert acts.groupby("step").size().tolist() == [9, 9, 9]  # input.fc/act, blocks.i.fc/act, readout
    assert (acts["value"] > 0).all()
    assert list(f.columns[:len(COLUMNS)]) == list(COLUMNS)


def test_detach_removes_every_hook():
    model = DeepMLP(16)
    opt = torch.optim.Adam(model.parameters())
    probe = GradFlowProbe(model, opt)
    assert any(m._forward_hooks for m in model.modules()) and opt._optimizer_step_post_hooks
    probe.detach()
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    assert not any(p._backward_hooks for p in model.parameters())
    assert not opt._optimizer_step_post_hooks


def test_remove_is_the_one_name_and_detach_its_old_alias():
    model = DeepMLP(16)
    with GradFlowProbe(model) as probe:
        assert any(m._forward_hooks for m in model.modules())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())  # __exit__ removed them
    assert GradFlowProbe.detach is GradFlowProbe.remove and probe.frame.empty


def test_training_is_bit_identical_with_and_without_the_probe():
    def train(with_probe: bool):
        torch.manual_seed(0)
        model = DeepMLP(32, activation="tanh")
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        probe = GradFlowProbe(model, opt) if with_probe else None
        for _ in range(3):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(BATCH.inputs), BATCH.targets)
            loss.backward()
            if probe is not None:
                probe.step(loss=loss)
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(train(False), train(True)))


def test_one_transfer_and_no_item_per_probe_step(monkeypatch):
    model = DeepMLP(32)
    probe = GradFlowProbe(model)
    nn.functional.cross_entropy(model(BATCH.inputs), BATCH.targets).backward()
    calls = []
    real_cpu = torch.Tensor.cpu
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self, *a, **k: calls.append(1) or real_cpu(self, *a, **k))
    monkeypatch.setattr(torch.Tensor, "item", lambda self: pytest.fail("host sync via .item()"))
    probe.step()
    assert len(calls) == 1


def test_checkpoint_recomputation_is_not_double_counted():
    torch.manual_seed(0)
    plain = gradflow_once(DeepMLP(32), BATCH)
    torch.manual_seed(0)
    ckpt = gradflow_once(DeepMLP(32, checkpointed=True), BATCH)
    key = ["kind", "name", "stat"]
    a, b = (f.set_index(key)["value"] for f in (plain, ckpt))
    pd.testing.assert_series_equal(a.xs("numel", level="stat"), b.xs("numel", level="stat"))
    pd.testing.assert_series_equal(a.drop("backward_order", level="stat"), b.drop("backward_order", level="stat"),
                                   rtol=1e-6)


def test_grad_scaler_norms_are_unscaled():
    if not hasattr(torch.amp, "GradScaler"):
        pytest.skip("torch.amp.GradScaler not available")
    try:
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    except Exception as e:  # pragma: no cover - older torch without CPU scaler
        pytest.skip(f"no CPU GradScaler: {e}")
    torch.manual_seed(0)
    model = DeepMLP(32)
    reference = gradflow_once(model, BATCH)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    probe = GradFlowProbe(model, opt, scaler=scaler)
    scaler.scale(nn.functional.cross_entropy(model(BATCH.inputs), BATCH.targets)).backward()
    scaled_grad = model.input.fc.weight.grad.clone()
    still_scaled = probe.step()
    assert torch.equal(model.input.fc.weight.grad, scaled_grad)  # read, never unscaled in place
    scaler.unscale_(opt)
    after_unscale = probe.step()  # grads are unscaled now: not divided twice
    probe.detach()
    for frame in (still_scaled, after_unscale):
        got = frame.query("stat == 'grad_norm'").set_index("name")["value"]
        want = reference.query("stat == 'grad_norm'").set_index("name")["value"]
        pd.testing.assert_series_equal(got, want, rtol=1e-5, check_names=False)
        assert stat(frame, "(global)", "loss_scale") == 2.0**10


def test_once_restores_grads_and_accepts_a_compiled_model():
    model = DeepMLP(16)
    marker = torch.full_like(model.input.fc.weight, 7.0)
    model.input.fc.weight.grad = marker
    frame = gradflow_once(torch.compile(model), BATCH)  # probes model._orig_mod, eagerly
    assert model.input.fc.weight.grad is marker and model.readout.weight.grad is None
    assert stat(frame, "input.fc.weight", "grad_norm") > 0
    assert (frame["kind"] == "activation").any() and set(frame["model"]) == {"DeepMLP"}
