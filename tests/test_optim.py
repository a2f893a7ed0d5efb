"""Optimizer factories (``coordcheck.setup.optim``): the mup variant scales per-layer learning rates, torch's does
not."""

import inspect

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from coordcheck.app.config import compose_config, options
from coordcheck.setup.models import mlp
from coordcheck.setup.optim import OPTIMIZERS, adam, adamw, sgd
from coordcheck.setup.parametrization import Mup, build_model

LR = 0.01
HIDDEN = ("blocks.0.fc.weight", "blocks.1.fc.weight")  # width x width: the matrix-like weights


@pytest.fixture(scope="module")
def wide():
    """The MLP at four times its base width (16 -> 64), base shapes set as the coord check sets them."""
    p = Mup()
    p.prepare(mlp, 16)
    return build_model(mlp, 64, 0, p)


def lrs(model, opt) -> dict[str, float]:
    """The learning rate each named parameter gets."""
    name = {id(p): n for n, p in model.named_parameters()}
    return {name[id(p)]: g["lr"] for g in opt.param_groups for p in g["params"]}


@pytest.mark.parametrize("name, cls", [("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW),
                                       ("sgd", torch.optim.SGD)])
def test_without_mu_every_parameter_gets_the_base_lr(wide, name, cls):
    opt = OPTIMIZERS[name](wide, LR)
    assert type(opt) is cls
    got = lrs(wide, opt)
    assert set(got) == {n for n, _ in wide.named_parameters()} and set(got.values()) == {LR}


@pytest.mark.parametrize("factory", [adam, adamw])
def test_mu_adam_divides_the_hidden_lr_by_the_width_multiplier(wide, factory):
    got = lrs(wide, factory(wide, LR, mu=True))
    assert {n: lr for n, lr in got.items() if lr != LR} == {n: pytest.approx(LR / 4) for n in HIDDEN}


def test_mu_sgd_multiplies_the_vector_like_lr_by_the_width_multiplier(wide):
    got = lrs(wide, sgd(wide, LR, mu=True))
    assert got["input.fc.weight"] == pytest.approx(4 * LR) and got["readout.weight"] == pytest.approx(4 * LR)
    assert all(got[n] == pytest.approx(LR) for n in HIDDEN)  # fan-in and fan-out grow alike
    assert got["readout.bias"] == pytest.approx(LR)  # of fixed size: not scaled


def test_a_tensor_lr_becomes_one_float_per_group(wide):
    lr = torch.tensor(LR)
    opt = adam(wide, lr, mu=True)
    assert all(type(g["lr"]) is float for g in opt.param_groups)
    assert torch.equal(lr, torch.tensor(LR))  # mup's in-place division did not reach the caller's tensor
    assert sorted({g["lr"] for g in opt.param_groups}) == [pytest.approx(LR / 4), pytest.approx(LR)]


def test_hyperparameters_reach_the_optimizer(wide):
    a = adam(wide, LR, betas=[0.8, 0.9], eps=1e-6, weight_decay=0.1)
    assert a.defaults["betas"] == (0.8, 0.9) and a.defaults["eps"] == 1e-6 and a.defaults["weight_decay"] == 0.1
    assert adamw(wide, LR).defaults["weight_decay"] == 0.01  # AdamW's default decay, as torch's
    s = sgd(wide, LR, momentum=0.9, weight_decay=1e-4)
    assert s.defaults["momentum"] == 0.9 and s.defaults["weight_decay"] == 1e-4


@pytest.mark.parametrize("parametrization, mu", [("mup", True), ("sp", False)])
def test_each_optimizer_config_is_its_factory_with_mu_from_the_parametrization(wide, parametrization, mu):
    assert set(OPTIMIZERS) <= set(options("optimizer"))
    with_mu = {name: f for name, f in OPTIMIZERS.items() if "mu" in inspect.signature(f).parameters}
    assert set(with_mu) == {"adam", "adamw", "sgd", "muon"}  # mup_groups: tests/test_mup_groups.py
    for name, factory in with_mu.items():
        node = compose_config([f"optimizer={name}", f"parametrization={parametrization}"]).optimizer
        assert node._target_ == f"coordcheck.setup.optim.{name}" and node.mu is mu
        opt = instantiate(node)(wide, LR)  # _partial_: called later as factory(model, lr)
        expected = lrs(wide, factory(wide, LR, mu=mu))
        assert lrs(wide, opt) == expected
    assert OmegaConf.is_missing(compose_config(["optimizer=factory"]).optimizer, "_target_")
