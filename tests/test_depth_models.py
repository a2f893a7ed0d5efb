"""The nanoGPT-mup-style CompleteP model (``coordcheck.testing.depth_models``): its optimizer factory's groups are
CompleteP's Table 1 per parameter, it trains and is deterministic, and its depth known answers (CompleteP by hand
passes; the branch multiplier dropped fails) on real training."""

import math

import numpy as np
import pytest
import torch

import coordcheck
from coordcheck.testing import depth_models as dm

pytestmark = pytest.mark.usefixtures("one_thread")

KINDS = {
    "transformer.wte.weight": "embedding", "transformer.wpe.weight": "embedding",
    "transformer.h.0.ln_1.weight": "block_vector", "transformer.h.0.ln_1.bias": "block_vector",
    "transformer.h.0.attn.c_attn.weight": "hidden", "transformer.h.0.attn.c_attn.bias": "block_vector",
    "transformer.h.0.attn.c_proj.weight": "hidden", "transformer.h.0.attn.c_proj.bias": "block_vector",
    "transformer.h.0.mlp.c_fc.weight": "hidden", "transformer.h.0.mlp.c_proj.bias": "block_vector",
    "transformer.ln_f.weight": "final_norm", "transformer.ln_f.bias": "final_norm", "lm_head.weight": "readout",
}


def groups_by_parameter(model, opt):
    """name -> (lr, eps, weight_decay) of the group that holds it; every parameter in exactly one group."""
    group_of = {}
    for g in opt.param_groups:
        for p in g["params"]:
            assert id(p) not in group_of, "a parameter in two groups"
            group_of[id(p)] = (g["lr"], g["eps"], g["weight_decay"])
    names = dict(model.named_parameters())
    assert set(group_of) == {id(p) for p in names.values()}, "a parameter missing from the optimizer"
    return {n: group_of[id(p)] for n, p in names.items()}


# (width, depth, base_width, base_depth, alpha) -> Table 1's numbers at lr 1e-2, eps 1e-8, wd 0.1, by kind:
# m_N = width / base_width, m_L = depth / base_depth; hidden lr * m_N^-1 * m_L^(a-1), eps * m_N^-1 * m_L^-a, wd * m_N;
# in-block vectors lr * m_L^(a-1), eps * m_L^-a, wd 0; embeddings and readout lr, eps, wd; final norm lr, eps, 0.
TABLE_1 = {
    (128, 8, 32, 2, 1.0): {  # m_N = 4, m_L = 4, CompleteP
        "hidden": (2.5e-3, 6.25e-10, 0.4), "block_vector": (1e-2, 2.5e-9, 0.0),
        "embedding": (1e-2, 1e-8, 0.1), "readout": (1e-2, 1e-8, 0.1), "final_norm": (1e-2, 1e-8, 0.0)},
    (64, 16, 64, 4, 0.5): {  # m_N = 1, m_L = 4, depth-muP
        "hidden": (5e-3, 5e-9, 0.1), "block_vector": (5e-3, 5e-9, 0.0),
        "embedding": (1e-2, 1e-8, 0.1), "readout": (1e-2, 1e-8, 0.1), "final_norm": (1e-2, 1e-8, 0.0)},
}


@pytest.mark.parametrize("point", list(TABLE_1))
def test_the_factory_gives_each_parameter_completep_table_1(point):
    width, depth, base_width, base_depth, alpha = point
    model = dm.build(width, depth, base_width, base_depth, depth_alpha=alpha)
    got = groups_by_parameter(model, dm.make_optimizer(model, 1e-2, weight_decay=0.1, eps=1e-8))
    assert dm.param_kinds(model) == {**dm.param_kinds(model), **KINDS}  # the names above are the model's
    assert sum(k == "hidden" for k in dm.param_kinds(model).values()) == 4 * depth  # c_attn, c_proj, c_fc, c_proj
    for name, kind in dm.param_kinds(model).items():
        assert got[name] == pytest.approx(TABLE_1[point][kind], rel=1e-12), (name, kind)


def test_at_the_base_width_and_depth_every_group_has_the_base_values():
    model = dm.build(64, 2, 64, 2)
    got = groups_by_parameter(model, dm.make_optimizer(model, 3e-3, weight_decay=0.0, eps=1e-6))
    assert set(got.values()) == {(3e-3, 1e-6, 0.0)}


def test_the_branch_multiplier_is_depth_over_base_to_the_minus_alpha_and_the_variant_drops_it():
    assert [b.residual_scale for b in dm.build(64, 8, base_depth=2).transformer.h] == [0.25] * 8
    assert dm.build(64, 8, base_depth=2, depth_alpha=0.5).transformer.h[0].residual_scale == pytest.approx(0.5)
    assert dm.build(64, 2, base_depth=2).transformer.h[0].residual_scale == 1.0
    dropped = dm.build_no_multiplier(64, 8, base_depth=2)
    assert {b.residual_scale for b in dropped.transformer.h} == {1.0}
    # everything else the same: the optimizer's depth factors stay
    kept = dm.build(64, 8, base_depth=2)
    assert groups_by_parameter(dropped, dm.make_optimizer(dropped, 1e-2)) == \
        groups_by_parameter(kept, dm.make_optimizer(kept, 1e-2))


def test_hidden_init_is_fan_in_and_logits_carry_the_output_multiplier():
    torch.manual_seed(0)
    model = dm.build(256, 2, base_width=64)  # m_N = 4
    assert model.transformer.h[0].mlp.c_fc.weight.std().item() == pytest.approx(0.02 / 2, rel=0.02)
    assert model.transformer.h[0].attn.c_proj.weight.std().item() == pytest.approx(0.02 / 2, rel=0.02)  # no 1/sqrt(2L)
    assert model.transformer.wte.weight.std().item() == pytest.approx(0.02, rel=0.02)
    idx = torch.randint(0, 256, (2, 8))
    logits, loss = model(idx)
    assert loss is None and logits.shape == (2, 8, 256)
    x = model.transformer.ln_f(model.transformer.h[1](model.transformer.h[0](
        model.transformer.wte(idx) + model.transformer.wpe(torch.arange(8)))))
    torch.testing.assert_close(logits, model.lm_head(x) / 4)


def train(seed, steps=5, depth=4):
    torch.manual_seed(seed)
    model = dm.build(32, depth, base_width=32)
    opt = dm.make_optimizer(model, 1e-2)
    idx = torch.randint(0, 256, (4, 16), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(steps):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model(idx[:, :-1])[0]


def test_it_trains_and_is_deterministic():
    losses, logits = train(0)
    assert losses[-1] < losses[0] - 0.1, losses
    assert abs(losses[0] - math.log(256)) < 0.05  # near-uniform logits at init
    again, logits_again = train(0)
    assert again == losses
    assert torch.equal(logits, logits_again)
    assert train(1)[0] != losses


# -- the depth known answers (real training; the harness as a user runs it) --------------------------------------

RUN = dict(width=64, depths=[2, 4, 8, 16], parametrization="none", optimizer=dm.make_optimizer, output=0,
           loss="model", forward_targets=True, data="tokens", base_width=64, lr=1e-2, steps=10, seeds=3,
           progress=False)


def residual_slope(frame, step):
    """Slope of log2(std of the last block's delta), mean of seeds, against log2(depth)."""
    last = frame[(frame["module"] == "transformer.h." + (frame["depth"] - 1).astype(str))
                 & (frame["tensor"] == "delta") & (frame["stat"] == "std") & (frame["step"] == step)]
    mean = last.groupby("depth")["value"].mean()
    return np.polyfit(np.log2(mean.index.to_numpy(float)), np.log2(mean.to_numpy()), 1)[0]


@pytest.fixture(scope="module")
def completep(one_thread):
    return coordcheck.coord_check(dm.build, **RUN)


@pytest.fixture(scope="module")
def no_multiplier(one_thread):
    return coordcheck.coord_check(dm.build_no_multiplier, **RUN)


# Measured (this file's RUN; slope of the residual stream's change since step 0 against log2 depth, steps 1 / 5 / 10):
# CompleteP by hand -0.10 / -0.15 / -0.20; the multiplier dropped +0.85 / +1.37 / +1.64.
@pytest.mark.slow
def test_the_residual_stream_change_is_flat_in_depth_with_the_multiplier_and_grows_without(completep, no_multiplier):
    frame = completep.frame
    assert sorted(frame["depth"].unique()) == [2, 4, 8, 16] and frame["family_id"].nunique() == 1
    assert frame["config_id"].nunique() == 4
    for step in (5, 10):
        assert abs(residual_slope(completep.frame, step)) < 0.4, step
        assert residual_slope(no_multiplier.frame, step) > 1.0, step
    loss = completep.frame[(completep.frame["tensor"] == "loss") & (completep.frame["step"] == 10)]
    by_depth = loss.groupby("depth")["value"].mean()
    assert by_depth[16] < by_depth[2]  # deeper is not worse


@pytest.mark.slow
def test_completep_by_hand_passes_the_depth_check(completep):
    assert completep.passed, completep.verdict.reason


@pytest.mark.slow
def test_the_branch_multiplier_dropped_fails_the_depth_check(no_multiplier):
    assert no_multiplier.verdict.status == "fail"
    assert "multiplier" in no_multiplier.verdict.reason
