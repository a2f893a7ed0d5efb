"""Gradient flow: known-answer models, the probe's mechanics, the report and the CLI."""

import functools
import json
import math
import subprocess
import sys

import mup
import pandas as pd
import pytest
import torch
from conftest import ROOT, run_cli
from gradflow_models import DeepMLP
from torch import nn

from coordcheck.data import gaussian, tokens
from coordcheck.gradflow import GradFlowProbe, gradflow_once, probe_training
from coordcheck.gradflow_report import BLOCKING, COLUMNS, Diagnosis, diagnose, exit_code, notes, write_gradflow_report
from coordcheck.models import gpt, mlp
from coordcheck.parametrization import Mup, build_model

BATCH = gaussian(batch_size=64, dim=16, n_classes=10)


def found(frame: pd.DataFrame, **kwargs) -> dict[str, Diagnosis]:
    return {d.code: d for d in diagnose(frame, **kwargs)}


def stat(frame: pd.DataFrame, name: str, stat: str, step: int | None = None) -> float:
    rows = frame[(frame["name"] == name) & (frame["stat"] == stat)]
    rows = rows if step is None else rows[rows["step"] == step]
    assert len(rows) == 1, (name, stat, step)
    return float(rows["value"].iloc[0])


def loop(model, optimizer, probe, steps, *, zero=True, set_to_none=True, before_step=None):
    """The user's loop: zero_grad (or not), forward, backward, probe.step, optimizer.step."""
    for t in range(steps):
        if zero:
            optimizer.zero_grad(set_to_none=set_to_none)
        loss = nn.functional.cross_entropy(model(BATCH.inputs), BATCH.targets)
        loss.backward()
        if before_step is not None:
            before_step(model)
        probe.step(t, loss=loss)
        optimizer.step()


def mup_model(build, width, base_width=32):
    parametrization = Mup()
    parametrization.prepare(build, base_width)
    model = build_model(build, width, 0, parametrization)
    return model, mup.MuAdam(model.parameters(), lr=0.01)


# -- known answers ------------------------------------------------------------------------
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


# -- the probe's mechanics --------------------------------------------------------------
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


# -- report -------------------------------------------------------------------------------
def test_report_files_diagnoses_first_and_nan_as_null(tmp_path):
    frame = gradflow_once(DeepMLP(32, detach_at=2), BATCH)
    diagnoses = diagnose(frame)
    md = write_gradflow_report(frame, diagnoses, tmp_path).read_text()
    assert md.startswith("# Gradient flow\n\n**Status: ERROR**") and md.index("broken\\_graph") < md.index("## Layers")
    text = (tmp_path / "gradflow.json").read_text()
    payload = json.loads(text)
    assert "NaN" not in text and payload["status"] == "error" and payload["exit_code"] == 1
    assert payload["diagnoses"][0]["code"] == "broken_graph" and payload["layers"][0]["grad_norm"] is None
    assert (tmp_path / "gradflow.png").read_bytes()[:4] == b"\x89PNG" and not list(tmp_path.glob("*.tmp"))


def test_exit_code_blocks_on_errors_only():
    warn = Diagnosis("saturation", "warning", "m", "f")
    err = Diagnosis("dead_layer", "error", "m", "f")
    assert exit_code([]) == 0 and exit_code([warn]) == 0 and exit_code([warn, err]) == 1
    assert {"no_gradients", "broken_graph", "nonfinite_gradients", "not_in_optimizer", "dead_layer"} <= set(BLOCKING)


def test_report_side_never_imports_torch(tmp_path):
    gradflow_once(DeepMLP(16, detach_at=1), BATCH).to_parquet(tmp_path / "gradflow.parquet")
    code = ("import sys, pandas as pd; from coordcheck.gradflow_report import diagnose, write_gradflow_report; "
            "f = pd.read_parquet(sys.argv[1] + '/gradflow.parquet'); d = diagnose(f); "
            "write_gradflow_report(f, d, sys.argv[1]); "
            "assert [x.code for x in d] == ['broken_graph'], d; assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-1000:]
    assert (tmp_path / "gradflow.md").is_file()


# -- CLI ----------------------------------------------------------------------------------
def test_cli_healthy_mlp_exits_0(tmp_path):
    r = run_cli("model=mlp", "width=64", f"hydra.run.dir={tmp_path}", cwd=tmp_path, module="coordcheck.gradflow")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "coordcheck.gradflow: OK" in r.stdout
    assert f"coordcheck.gradflow: report {tmp_path / 'gradflow.md'}" in r.stdout
    for name in ("gradflow.parquet", "gradflow.md", "gradflow.json", "gradflow.png", "gradflow.pdf"):
        assert (tmp_path / name).is_file(), name
    frame = pd.read_parquet(tmp_path / "gradflow.parquet")
    assert sorted(frame["step"].unique()) == [0, 1] and set(frame["model"]) == {"mlp"} and set(frame["width"]) == {64}


def test_cli_blocking_diagnosis_exits_1(tmp_path):
    r = run_cli("model=mlp", "model._target_=tests.gradflow_models.detached_mlp", "parametrization=none", "width=32",
                "figures=false", f"hydra.run.dir={tmp_path}", cwd=tmp_path, module="coordcheck.gradflow")
    assert r.returncode == 1, r.stderr[-2000:]
    assert "coordcheck.gradflow: ERROR broken_graph: " in r.stdout and " — fix: " in r.stdout
    assert json.loads((tmp_path / "gradflow.json").read_text())["status"] == "error"


def test_cli_user_mistake_is_one_line_and_exit_2(tmp_path):
    r = run_cli("width=66", f"hydra.run.dir={tmp_path}", cwd=tmp_path, module="coordcheck.gradflow")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert [line for line in r.stderr.splitlines() if line.startswith("coordcheck.gradflow: error:")] == [
        "coordcheck.gradflow: error: width 66 is not divisible by n_head=4: use widths that are multiples of 4 "
        "(or change n_head)"]
