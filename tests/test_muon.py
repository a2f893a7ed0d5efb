"""``optimizer=muon`` (``coordcheck.setup.optim.muon``): Muon on the hidden matrices, (Mu)AdamW on the rest, and the
``adjust_lr_fn`` that keeps hidden updates width-invariant (the spectral condition) against the one that does not."""

from __future__ import annotations

import functools

import mup
import pytest
import torch
import torch.nn.functional as F
from hydra.utils import instantiate

from coordcheck import coord_check
from coordcheck.app.config import compose_config, options
from coordcheck.setup.data import gaussian
from coordcheck.core.errors import CoordCheckError
from coordcheck.setup.models import gpt, mlp
from coordcheck.setup.optim import (MUON_ADJUST_LR, MUON_WIDTH_INVARIANT, MuonWithAdamW, muon,
                              muon_lr_factor)
from coordcheck.setup.parametrization import Mup, Standard, build_model
from coordcheck.testing.public_models import gpt_builder

LR = 0.01
GPT_HIDDEN = {f"blocks.{b}.{m}.weight" for b in (0, 1)
              for m in ("attn.c_q", "attn.c_k", "attn.c_v", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}
MLP_HIDDEN = {"blocks.0.fc.weight", "blocks.1.fc.weight"}  # input.fc (width x in_dim) and the readout are not


def built(build, width, parametrization, base_width=16):
    p = parametrization()
    p.prepare(build, base_width)
    return build_model(build, width, 0, p)


def parts(model, opt) -> tuple[set[str], set[str]]:
    """Parameter names in Muon's part and in the AdamW part."""
    name = {id(p): n for n, p in model.named_parameters()}
    return ({name[id(p)] for g in opt.muon.param_groups for p in g["params"]},
            {name[id(p)] for g in opt.adamw.param_groups for p in g["params"]})


@pytest.fixture
def mu_adamw_calls(monkeypatch):
    """The parameters each call of mup.MuAdamW got (it returns a torch AdamW, so the type cannot tell)."""
    calls, real = [], mup.MuAdamW

    def spy(params, **kwargs):
        params = list(params)
        calls.append(params)
        return real(params, **kwargs)

    monkeypatch.setattr(mup, "MuAdamW", spy)
    return calls


@pytest.mark.parametrize("parametrization", [Mup, Standard])
@pytest.mark.parametrize("build, hidden", [(gpt, GPT_HIDDEN), (mlp, MLP_HIDDEN)])
def test_muon_takes_every_hidden_matrix_and_nothing_else(parametrization, build, hidden, mu_adamw_calls):
    model = built(build, 64, parametrization)  # the GPT's vocabulary (256) is no width: the base shapes tell
    opt = muon(model, LR, mu=parametrization is Mup)
    assert isinstance(opt, MuonWithAdamW) and type(opt.muon) is torch.optim.Muon
    assert type(opt.adamw) is torch.optim.AdamW
    assert len(mu_adamw_calls) == (parametrization is Mup)  # MuAdamW for the rest under mup only
    in_muon, in_adamw = parts(model, opt)
    assert in_muon == hidden and in_adamw == {n for n, _ in model.named_parameters()} - hidden
    assert all(g["adjust_lr_fn"] == MUON_WIDTH_INVARIANT for g in opt.muon.param_groups)
    both = opt.muon.param_groups + opt.adamw.param_groups  # the same dicts: zero_grad, a scaler, a schedule see all
    assert len(opt.param_groups) == len(both) and all(a is b for a, b in zip(opt.param_groups, both))


def test_under_mup_the_rest_keeps_the_base_lr_and_muon_is_not_width_scaled():
    model = built(mlp, 64, Mup)  # width multiplier 4: MuAdamW would give hidden matrices LR / 4
    opt = muon(model, LR, mu=True)
    assert {g["lr"] for g in opt.param_groups} == {LR}  # vector-like and Muon's: the base lr (shape-adjusted later)


def test_sp_keeps_width_multipliers_at_one_while_marking_the_width_dimensions():
    model = built(gpt, 64, Standard)
    assert model.lm_head.width_mult() == 1.0  # SP: no output multiplier
    assert model.wte.weight.infshape.ninf() == 1 and model.blocks[0].mlp.c_fc.weight.infshape.ninf() == 2
    assert all(d.width_mult() == 1.0 for _, p in model.named_parameters() for d in p.infshape)


def test_a_hand_written_model_names_its_hidden_matrices():
    model = gpt_builder(64, base_width=32)  # parametrization=none: no base shapes
    with pytest.raises(CoordCheckError, match=r"optimizer.hidden=") as e:
        muon(model, LR)
    assert "\n" not in str(e.value)
    in_muon, in_adamw = parts(model, opt := muon(model, LR, hidden=["transformer.h.*.weight"]))
    assert in_muon == {f"transformer.h.{b}.{m}.weight" for b in (0, 1)
                       for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}
    assert {"lm_head.weight", "transformer.wte.weight", "transformer.h.0.ln_1.weight"} <= in_adamw  # 1-D: AdamW
    assert type(opt.adamw) is torch.optim.AdamW
    with pytest.raises(CoordCheckError, match="matches no 2-D parameter"):
        muon(model, LR, hidden="decoder.*")


def test_a_model_without_hidden_matrices_is_one_line():
    from coordcheck.testing.public_models import resnet_builder  # hidden convolutions are 4-D: not Muon's

    with pytest.raises(CoordCheckError, match="no 2-D matrix whose two dimensions grow with width.*adamw"):
        muon(built(resnet_builder, 16, Mup, base_width=8), LR, mu=True)


@pytest.mark.parametrize("bad", ["rms", "Original", None])
def test_an_unknown_adjust_lr_fn_is_one_line(bad):
    model = built(mlp, 32, Mup)
    with pytest.raises(CoordCheckError, match=r"optimizer.adjust_lr_fn must be one of original, ") as e:
        muon(model, LR, adjust_lr_fn=bad)
    assert "\n" not in str(e.value)
    factory = instantiate(compose_config(["optimizer=muon", "optimizer.adjust_lr_fn=rms"]).optimizer)
    with pytest.raises(CoordCheckError, match="got 'rms'"):
        factory(model, LR)


@pytest.mark.parametrize("fn", sorted(MUON_ADJUST_LR))
def test_the_lr_factor_is_torchs(fn):
    from torch.optim._muon import _adjust_lr  # the adjustment Muon applies; ours is the same formula

    for shape in [(64, 64), (256, 64), (64, 256), (1024, 4096)]:
        assert muon_lr_factor(fn, shape) == pytest.approx(_adjust_lr(1.0, fn, torch.Size(shape)))


@pytest.mark.parametrize("parametrization, mu", [("mup", True), ("sp", False)])
def test_the_config_composes_to_the_factory(parametrization, mu, mu_adamw_calls):
    assert "muon" in options("optimizer")
    node = compose_config(["optimizer=muon", f"parametrization={parametrization}"]).optimizer
    assert node._target_ == "coordcheck.setup.optim.muon" and node.mu is mu
    assert node.adjust_lr_fn == MUON_WIDTH_INVARIANT
    model = built(gpt, 32, Mup if mu else Standard)
    opt = instantiate(node)(model, LR)
    assert parts(model, opt)[0] == GPT_HIDDEN and len(mu_adamw_calls) == mu
    node = compose_config(["optimizer=muon", "optimizer.adjust_lr_fn=match_rms_adamw", "optimizer.momentum=0.9",
                           "optimizer.muon_lr_ratio=2"]).optimizer
    g = instantiate(node)(model, LR).muon.param_groups[0]
    assert (g["adjust_lr_fn"], g["momentum"], g["lr"]) == ("match_rms_adamw", 0.9, pytest.approx(2 * LR))


def update_norm(width: int, adjust_lr_fn: str) -> float:
    """Spectral norm of the second update of the MLP's first hidden matrix, no weight decay (the readout is zero at
    init, so the first update reaches only the readout)."""
    model = built(mlp, width, Mup)
    opt = muon(model, LR, mu=True, adjust_lr_fn=adjust_lr_fn, weight_decay=0.0)
    batch = gaussian(dim=32, n_classes=10)
    w = model.blocks[0].fc.weight
    for _ in range(2):
        before = w.detach().clone()
        opt.zero_grad()
        F.cross_entropy(model(batch.inputs), batch.targets).backward()
        opt.step()
    return torch.linalg.matrix_norm(w.detach() - before, ord=2).item()


def test_the_spectral_norm_of_the_update_is_flat_in_width_only_with_the_spectral_setting():
    # width x width: the spectral condition wants ||dW||_2 ~ sqrt(fan_out / fan_in) = 1 at every width
    for fn, growth in [("original", 1.0), ("spectral_unclamped", 1.0), ("match_rms_adamw", 2.0)]:  # 4x the width
        narrow, wide = update_norm(32, fn), update_norm(128, fn)
        assert 0.5 < narrow / (LR * muon_lr_factor(fn, (32, 32))) < 1.5  # orthogonalised: singular values near 1
        assert wide / narrow == pytest.approx(growth, rel=0.15), fn


def test_state_survives_a_round_trip():
    model = built(mlp, 32, Mup)
    opt = muon(model, LR, mu=True)
    batch = gaussian(dim=32, n_classes=10)
    F.cross_entropy(model(batch.inputs), batch.targets).backward()
    opt.step()
    again = muon(model, LR, mu=True)
    again.load_state_dict(opt.state_dict())
    w = model.blocks[0].fc.weight
    assert torch.equal(again.muon.state[w]["momentum_buffer"], opt.muon.state[w]["momentum_buffer"])
    assert len(again.adamw.state) == len(opt.adamw.state) > 0


@pytest.mark.slow
def test_the_spectral_setting_passes_and_the_rms_matched_one_fails():
    # Measured (experiments/muon.py, 1 thread, widths 128-512): original PASS; match_rms_adamw FAIL, 20 modules, hidden
    # delta slopes +0.48..+0.53 (||dW||_2 = 0.2 lr sqrt(width)); about 35 s for both on one core. Over seeds (2, 3)
    # and (4, 5): original passes with its nearest series 0.11 and 0.15 inside the band, match_rms_adamw fails 0.32
    # past it. Here at widths 64-256 (2026-12-05): PASS, and FAIL with 8 of the 10 hidden matrices' delta: torch's
    # Muon orthogonalises in bfloat16, which a CPU without native bfloat16 (an AVX2-only EPYC) runs ~8x slower than
    # float32 and worse with size — width 512 alone took ~2.5 min a seed there, the test 163 s at 64-256.
    run = dict(parametrization="mup", lr=LR, steps=5, seeds=2, progress=False)
    good = coord_check(gpt, [64, 128, 256], optimizer=functools.partial(muon, mu=True), **run).verdict
    assert good.status == "pass", good.reason
    bad = coord_check(gpt, [64, 128, 256], optimizer=functools.partial(muon, mu=True, adjust_lr_fn="match_rms_adamw"),
                      **run).verdict
    assert bad.status == "fail"
    failing = bad.series[bad.series["in_window"] & bad.series["status"].eq("fail")]
    hidden = failing[failing["module"].str.contains(r"\.(?:attn\.c_[qvp]\w*|mlp\.c_\w+)$")
                     & failing["tensor"].eq("delta")]
    assert hidden["module"].nunique() >= 8  # the hidden matrices' own outputs
    assert hidden["slope"].median() == pytest.approx(0.5, abs=0.15)  # sqrt(width)


def test_a_grad_scaler_unscales_and_steps_both_parts():
    model = built(mlp, 32, Mup)
    opt = muon(model, LR, mu=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    batch = gaussian(dim=32, n_classes=10)
    hidden, readout = model.blocks[0].fc.weight, model.readout.weight
    for _ in range(2):  # the zero readout passes no gradient to the hidden matrices at the first step
        opt.zero_grad()
        F.cross_entropy(model(batch.inputs), batch.targets).backward()
        plain = {p: p.grad.clone() for p in (hidden, readout)}
        before = {p: p.detach().clone() for p in (hidden, readout)}
        opt.zero_grad()
        scaler.scale(F.cross_entropy(model(batch.inputs), batch.targets)).backward()
        scaler.unscale_(opt)  # as train.update does before clipping: the gradients of every group, both parts
        assert all(torch.allclose(p.grad, plain[p], rtol=1e-4, atol=1e-9) for p in plain)
        scaler.step(opt)
        scaler.update()
    assert all(not torch.equal(p, before[p]) for p in before)


def test_the_api_takes_muon_by_name():
    r = coord_check(mlp, [16, 32], optimizer="muon", steps=1, seeds=1, base_width=16, progress=False)
    assert set(r.frame["optimizer"]) == {"muon"} and set(r.frame["width"]) == {16, 32}
