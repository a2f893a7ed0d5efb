"""muP by hand without a factory: ``optimizer=mup_groups`` (``coordcheck.setup.optim.mup_groups``) and ``init=mup``
(``coordcheck.setup.init.mup_init``) — mup's learning rates and init from the builder's shapes at two widths."""

import pytest
import torch
from hydra.utils import instantiate
from torch import nn

from coordcheck import coord_check
from coordcheck.app.config import RUN_DEFAULTS, compose_config, options
from coordcheck.app.checks import check_command_line
from coordcheck.setup.data import tokens
from coordcheck.core.errors import CoordCheckError
from coordcheck.setup.init import mup_init
from coordcheck.setup.models import gpt, mlp
from coordcheck.setup.optim import adam, adamw, mup_groups, sgd
from coordcheck.setup.parametrization import AsGiven, Mup, Standard, build_model
from coordcheck.testing import library_style
from coordcheck.run.train import build_on

from conftest import run_in_process

BASE, WIDE = 32, 128
GPT = dict(n_layer=1, context=8)


def gpt_small(width: int):
    return gpt(width, **GPT)


def per_param(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, tuple[float, float]]:
    """``name -> (lr, weight_decay)`` of each parameter, as its group gives them."""
    name = {id(p): n for n, p in model.named_parameters()}
    return {name[id(p)]: (g["lr"], g["weight_decay"]) for g in opt.param_groups for p in g["params"]}


@pytest.fixture(scope="module")
def mup_gpt():
    """The built-in GPT (MuReadout) at four times its base width, under parametrization=mup."""
    par = Mup()
    par.prepare(gpt_small, BASE)
    return build_model(gpt_small, WIDE, 0, par, BASE)


@pytest.mark.parametrize("kind, mu_factory", [("adamw", adamw), ("adam", adam), ("sgd", sgd)])
def test_the_same_lr_and_weight_decay_per_parameter_as_mups_optimizer(mup_gpt, kind, mu_factory):
    ours = mup_groups(mup_gpt, 0.01, build=gpt_small, base_width=BASE, kind=kind, weight_decay=0.1)
    theirs = mu_factory(mup_gpt, 0.01, mu=True, weight_decay=0.1)
    assert type(ours) is type(theirs)
    got, want = per_param(mup_gpt, ours), per_param(mup_gpt, theirs)
    assert got == want  # parameter by parameter, the very floats MuAdamW / MuAdam / MuSGD compute
    if kind != "sgd":
        assert got["blocks.0.mlp.c_fc.weight"] == (0.01 / 4, 0.1 * 4)  # hidden: lr * base_width / width
        assert got["lm_head.weight"] == got["wte.weight"] == (0.01, 0.1)  # the rest: lr
    else:
        assert got["wte.weight"] == (0.01 * 4, 0.1 / 4) and got["blocks.0.mlp.c_fc.weight"] == (0.01, 0.1)


def test_a_mup_sweep_with_mup_groups_trains_exactly_as_with_muadamw():
    run = dict(steps=2, seeds=1, progress=False, device="cpu", data=tokens(batch_size=2, seq_len=8), base_width=16,
               **GPT)
    ours = coord_check(gpt, [16, 32], optimizer="mup_groups", **run).frame
    theirs = coord_check(gpt, [16, 32], optimizer="adamw", **run).frame
    assert len(ours) == len(theirs) and (ours["value"].to_numpy() == theirs["value"].to_numpy()).all()  # bitwise


def test_under_none_the_model_is_left_as_given_and_the_groups_still_scale():
    model = build_model(library_style.build, WIDE, 0, AsGiven(), BASE)
    opt = mup_groups(model, 0.01, build=library_style.build, base_width=BASE)
    assert not any(hasattr(p, "infshape") for p in model.parameters())  # nothing set on the model
    got = {n: lr for n, (lr, _) in per_param(model, opt).items()}
    hidden = {n for n in got if n.startswith("blocks.") and n.endswith(("up.weight", "down.weight"))}
    assert len(hidden) == 4 and all(got[n] == 0.01 * BASE / WIDE for n in hidden)
    assert all(lr == 0.01 for n, lr in got.items() if n not in hidden)  # embedding, norms, readout


def test_under_sp_the_groups_come_from_base_width_not_from_sps_own_shapes():
    par = Standard()
    par.prepare(gpt_small, BASE)
    model = build_model(gpt_small, WIDE, 0, par, BASE)
    got = per_param(model, mup_groups(model, 0.01, build=gpt_small, base_width=BASE))
    assert got["blocks.0.attn.c_k.weight"][0] == 0.01 / 4 and got["lm_head.weight"][0] == 0.01
    assert model.lm_head.width_mult() == 1  # sp's readout untouched: no 1/width multiplier appears


def stds(model: nn.Module) -> dict[str, float]:
    return {n: p.detach().double().std().item() for n, p in model.named_parameters() if p.numel() > 1}


def test_init_mup_gives_the_hidden_class_std_from_base_width_and_leaves_the_rest():
    build, par = library_style.build, AsGiven()
    base = stds(build_model(build, BASE, 3, par, BASE))
    before = build_model(build, WIDE, 3, par, BASE)
    after = build_model(build, WIDE, 3, par, BASE)
    rng = torch.get_rng_state()
    mup_init(after, build=build, base_width=BASE, seed=3, parametrization=par)
    assert torch.equal(rng, torch.get_rng_state())  # the base-width build did not move the global RNG
    now = stds(after)
    hidden = [n for n in now if n.endswith(("up.weight", "down.weight"))]
    assert len(hidden) == 4
    for n in hidden:  # std_w = std_base * sqrt(base_fan_in / fan_in): halved at 4x the width
        assert now[n] == pytest.approx(base[n] * (BASE / WIDE) ** 0.5, rel=1e-6)  # float32 rounding
        assert now[n] == pytest.approx(stds(before)[n] / 2, rel=0.05)  # one std (0.02) at every width before
    for n, p in before.named_parameters():
        if n not in hidden:
            assert torch.equal(p, dict(after.named_parameters())[n]), n  # embedding, norms, readout: as built


def test_init_mup_keeps_a_fan_in_init_and_a_zero_init():
    par = Mup()
    par.prepare(gpt_small, BASE)
    before = build_model(gpt_small, WIDE, 0, par, BASE)
    after = build_model(gpt_small, WIDE, 0, par, BASE)
    mup_init(after, build=gpt_small, base_width=BASE, seed=0, parametrization=par)
    assert torch.equal(after.blocks[0].attn.c_q.weight, torch.zeros_like(after.blocks[0].attn.c_q.weight))
    ratio = (after.blocks[0].mlp.c_fc.weight.std() / before.blocks[0].mlp.c_fc.weight.std()).item()
    assert ratio == pytest.approx(1.0, abs=0.03)  # already std = fan_in^-1/2: only the sampling noise moves


def test_the_harness_hands_build_width_and_base_width_to_factories_that_name_them():
    seen = {}

    def factory(model, lr, width, base_width):
        seen.update(width=width, base_width=base_width)
        return torch.optim.SGD(model.parameters(), lr=lr)

    build = library_style.build
    build_on("cpu", build, 64, 0, AsGiven(), 16, factory, 0.1)
    assert seen == {"width": 64, "base_width": 16}
    build_on("cpu", build, 64, 0, AsGiven(), 16, lambda model, lr: torch.optim.SGD(model.parameters(), lr=lr), 0.1)


def test_configs_compose_and_build_the_same_optimizer():
    assert {"mup_groups"} <= set(options("optimizer")) and {"none", "mup"} <= set(options("init"))
    cfg = compose_config(["optimizer=mup_groups", "optimizer.kind=sgd", "optimizer.weight_decay=0", "init=mup",
                          "parametrization=none"])
    model = build_model(library_style.build, WIDE, 0, AsGiven(), BASE)
    opt = instantiate(cfg.optimizer)(model, 0.1, build=library_style.build, base_width=BASE)
    assert type(opt) is torch.optim.SGD
    assert per_param(model, opt) == per_param(model, mup_groups(model, 0.1, build=library_style.build,
                                                                base_width=BASE, kind="sgd", weight_decay=0.0))
    assert instantiate(cfg.init).func is mup_init
    for name in ("config", "transfer"):  # init=none is a default left out of config_id: old sweeps resume
        node = compose_config([], name).init
        assert dict(node) == RUN_DEFAULTS["init"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(kind="lion"), "optimizer.kind must be one of adamw, adam, sgd, got 'lion'"),
    (dict(momentum=0.9), "optimizer.momentum=0.9 is SGD's"),
])
def test_bad_settings_are_one_line(kwargs, message):
    model = mlp(64)
    with pytest.raises(CoordCheckError, match="^" + message.replace("(", r"\(")) as e:
        mup_groups(model, 0.01, build=mlp, base_width=16, **kwargs)
    assert "\n" not in str(e.value)


def fixed_size(width: int) -> nn.Module:  # ignores its width
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


@pytest.mark.parametrize("call", [
    lambda m: mup_groups(m, 0.01, build=fixed_size, base_width=16),
    lambda m: mup_init(m, build=fixed_size, base_width=16, seed=0, parametrization=AsGiven()),
])
def test_a_model_whose_shapes_do_not_change_with_width_is_one_line(call):
    with pytest.raises(CoordCheckError, match="no parameter of the model changes shape between width 16 and 32") as e:
        call(fixed_size(64))
    assert "\n" not in str(e.value)


def test_an_unknown_kind_on_the_command_line_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    code = run_in_process(monkeypatch, "model=mlp", "width=32", "steps=1", "seeds=1", "progress=false", "threads=1",
                          "optimizer=mup_groups", "optimizer.kind=lion", f"hydra.run.dir={tmp_path}")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["coordcheck: error: optimizer.kind must be one of adamw, adam, sgd, got 'lion'"]


@pytest.mark.parametrize("config, args", [
    ("config", ["--multirun", "optimizer=mup_groups", "optimizer.kind=adam,lion", "width=32,64"]),
    ("transfer", ["--multirun", "optimizer=mup_groups", "optimizer.kind=lion"]),
])
def test_an_unknown_kind_in_a_sweep_is_one_line_before_any_job_runs(config, args):
    with pytest.raises(CoordCheckError) as e:
        check_command_line(args, config_name=config, check=None, knobs=None)
    assert str(e.value) == "optimizer.kind must be one of adamw, adam, sgd, got 'lion'"
    check_command_line(["--multirun", "optimizer=mup_groups", "optimizer.kind=adam,sgd"], check=None)  # fine


def test_unknown_init_is_one_line(monkeypatch, capsys):
    assert run_in_process(monkeypatch, "init=xavier") == 2
    assert capsys.readouterr().err.strip() == "coordcheck: error: unknown init 'xavier': choose one of mup, none " \
                                              "(conf/init/)"
    with pytest.raises(CoordCheckError, match="unknown init 'xavier'"):
        coord_check(mlp, [16], init="xavier", steps=1, seeds=1, progress=False)


# -- real runs: a model from a library without muP, made muP by config alone --------------------------------------

WIDTHS = [64, 128, 256]
RUN = dict(steps=4, seeds=2, progress=False, device="cpu", base_width=64, data=tokens(batch_size=2, seq_len=16),
           parametrization="none")


@pytest.mark.slow
def test_one_std_model_with_an_output_multiplier_passes_with_mup_groups_and_init_mup():
    r = coord_check(library_style.build, WIDTHS, optimizer="mup_groups", init="mup", **RUN)
    assert r.passed, r.verdict.reason
    hidden = r.verdict.series.query("role == 'hidden' and tensor in ['out', 'delta']")
    assert len(hidden) and hidden["slope"].abs().median() < 0.2  # 0.11 measured; plain Adam: above 1
    lr = r.audit.set_index("parameter").loc["blocks.0.up.weight", "lr_exponent"]
    assert lr == pytest.approx(-1.0, abs=0.05)  # measured from the updates: width^-1 (-1.0001)


@pytest.mark.slow
@pytest.mark.parametrize("kwargs, kind, fix", [
    (dict(optimizer="adam", init="mup"), "lr", "multiply their learning rate by base_width / width"),
    (dict(optimizer="mup_groups"), "init", "initialise them with std ∝ fan_in^-1/2"),
    # the multiplier lives in the model's forward, outside any module: the cause names the root and the fix
    (dict(optimizer="mup_groups", init="mup", logits_scaling=1.0), "output_multiplier",
     "multiply its output by base_width / width"),
])
def test_the_same_model_fails_without_each_part(kwargs, kind, fix):
    r = coord_check(library_style.build, WIDTHS, **RUN, **kwargs)
    assert r.verdict.status == "fail"
    first = r.verdict.causes.iloc[0]
    assert first["kind"] == kind and fix in first["fix"]
    assert r.verdict.reason.startswith("cause: " + first["line"])  # the one story: the reason leads with the cause
    if kwargs["optimizer"] == "adam":
        hidden = r.verdict.series.query("role == 'hidden' and tensor == 'delta' and step == 4")
        assert hidden["slope"].median() > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("module, extra", [("coordcheck", []), ("coordcheck.transfer", ["eval_batches=1", "lr=0.004"])])
def test_both_command_lines_run_mup_groups_and_init_mup(monkeypatch, capsys, tmp_path, module, extra):
    code = run_in_process(
        monkeypatch, "--multirun", "model=custom", "model._target_=coordcheck.testing.library_style.build",
        *(["data=tokens"] if module == "coordcheck" else []), "parametrization=none", "optimizer=mup_groups",
        "init=mup", "width=32,64", "base_width=32", "steps=2", "seeds=1", "progress=false", "threads=1",
        "report.figures=false", f"hydra.sweep.dir={tmp_path}", *extra, module=module)
    assert code == 0, capsys.readouterr().err
    jobs = sorted(tmp_path.glob("*/job.json"))
    assert len(jobs) == 2 and all('"status": "ok"' in j.read_text() for j in jobs)


@pytest.mark.slow  # ~8 s, most of it the report's imports
def test_the_gradient_flow_probe_builds_the_model_as_the_sweep_does(tmp_path):
    from coordcheck.gradflow.app import run

    cfg = compose_config(["model=custom", "model._target_=coordcheck.testing.library_style.build", "data=tokens",
                          "parametrization=none", "optimizer=mup_groups", "init=mup", "width=64", "base_width=32",
                          "figures=false", "device=cpu"], "gradflow")
    frame, _, _ = run(cfg, tmp_path)
    assert frame["optimizer"].unique().tolist() == ["mup_groups"] and len(frame)
