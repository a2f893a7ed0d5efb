"""Issue 29: mixtures of experts judged by their own muP rules — the router an output weight, its softmax routing,
3-D expert stacks hidden matrices — on the built-in MoE (known answers) and on transformers' GraniteMoe."""

from __future__ import annotations

import functools
import json

import pandas as pd
import pytest
import torch

from coordcheck import coord_check
from coordcheck.record.shapes import dim_growth, growth_text, param_class
from coordcheck.setup.init import mup_init
from coordcheck.setup.moe import moe
from coordcheck.setup.optim import mup_groups
from coordcheck.setup.parametrization import AsGiven, routers, width_infshapes
from coordcheck.testing.planted_moe import FAULTS, builder, planted_moe_optimizer

WIDTHS = [64, 128, 256]
QUICK = dict(steps=6, seeds=2, progress=False, tensors=["out", "delta", "in", "own"], data="tokens")


# -- what each parameter is ------------------------------------------------------------------------------------------

def test_a_stack_of_expert_matrices_is_classed_by_its_last_two_dimensions():
    up = dim_growth({64: [8, 128, 64], 128: [8, 256, 128], 256: [8, 512, 256]})  # experts x out x in
    assert param_class(up)[0] == "hidden" and growth_text(up) == "dims 1, 2 of 3"
    router = dim_growth({64: [8, 64], 128: [8, 128]})
    assert param_class(router)[0] == "output-like" and growth_text(router) == "dim 1 of 2"
    assert param_class(dim_growth({64: [64, 8, 64], 128: [128, 8, 128]}))[0] == "other"  # the stack dimension grows


class _Block(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.router = torch.nn.Linear(width, 8, bias=False)  # as Mixtral / OLMoE write it: width -> experts
        self.experts = torch.nn.Parameter(torch.randn(8, width, width) * width ** -0.5)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        gates = self.router(x).softmax(-1)
        return x + torch.einsum("te,eoi,ti->to", gates, self.experts, self.norm(x))


class _PlainMoE(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.inp = torch.nn.Linear(16, width)
        self.blocks = torch.nn.ModuleList([_Block(width), _Block(width)])
        self.head = torch.nn.Linear(width, 10)  # after the blocks: the readout, not a router

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def test_mup_groups_and_init_mup_give_a_plain_router_an_output_weights_lr_and_std():
    torch.manual_seed(0)
    model = _PlainMoE(256)
    shapes = width_infshapes(model, _PlainMoE, 64, who="test")
    assert routers(model, shapes) == {"blocks.0.router.weight", "blocks.1.router.weight"}  # not the head
    opt = mup_groups(model, 0.01, build=_PlainMoE, base_width=64, weight_decay=0.0)
    lr = {n: g["lr"] for g in opt.param_groups for p in g["params"] for n, q in model.named_parameters() if p is q}
    assert lr["blocks.0.router.weight"] == pytest.approx(0.01 / 4)  # Table 3: lr ∝ 1/fan_in
    assert lr["blocks.0.experts"] == pytest.approx(0.01 / 4)  # the 3-D stack: a hidden matrix
    assert lr["head.weight"] == pytest.approx(0.01)  # the readout: its multiplier is the model's (as mup's)
    before = model.blocks[0].router.weight.std().item()
    mup_init(model, build=_PlainMoE, base_width=64, seed=0, parametrization=AsGiven())
    after = model.blocks[0].router.weight.std().item()
    assert after == pytest.approx(before / 2, rel=0.1)  # nn.Linear's fan_in^-1/2 at 64, / width_mult 4: half


# -- the built-in MoE: correct by default, each planted fault named exactly -----------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("fault", list(FAULTS))
def test_the_built_in_moe_known_answers(fault):
    model_kw, opt_kw, (kind, planted) = FAULTS[fault]
    v = coord_check(builder(**model_kw), WIDTHS, parametrization="mup",
                    optimizer=functools.partial(planted_moe_optimizer, **opt_kw), **QUICK).verdict
    if not planted:
        assert v.status == "pass", v.reason
        return
    assert v.status == "fail", v.reason
    first = v.causes.sort_values("order").iloc[0]
    assert first["kind"] == kind, v.causes[["kind", "what"]]
    named = {m for ms in v.causes["modules"] for m in ms}
    assert named == set(planted), v.causes[["kind", "modules"]]  # the planted ones, nothing upstream, no sibling
    assert "attention" not in v.first_cause and "fan_in**-0.5" not in v.first_cause


@pytest.mark.slow
@pytest.mark.parametrize("knobs", [{"experts_as": "list"}, {"shared_expert": True}, {"top_k": 1}])
def test_each_knob_of_the_built_in_moe_stays_mup(knobs):
    v = coord_check(functools.partial(moe, **knobs), WIDTHS, **QUICK).verdict
    assert v.status == "pass", v.reason


@pytest.mark.slow
def test_the_built_in_moe_in_standard_parametrization_fails():
    v = coord_check(moe, WIDTHS, parametrization="sp", **QUICK).verdict
    assert v.status == "fail"
    assert "router" not in v.first_cause or "output weight" in v.first_cause


# -- transformers' GraniteMoe, as a user runs it ---------------------------------------------------------------------

GRANITE_MOE = ["+experiment=granite_mup", "model.config=granitemoe", "width=64,128,256", "seeds=2", "steps=6",
               "tensors=[out,delta,in,own]", "threads=1", "progress=false", "report.figures=false"]


def _run(monkeypatch, capsys, tmp_path, *overrides: str) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    from conftest import run_in_process

    code = run_in_process(monkeypatch, *GRANITE_MOE, *overrides, f"hydra.sweep.dir={tmp_path}", "--multirun")
    capsys.readouterr()
    assert code == 0
    out = tmp_path / "report"
    return (json.loads((out / "report.json").read_text()), pd.read_csv(out / "verdict.csv"),
            pd.read_csv(out / "audit.csv"))


@pytest.mark.slow
def test_granitemoe_router_is_output_like_and_its_softmax_routing(monkeypatch, capsys, tmp_path):
    pytest.importorskip("transformers")
    report, verdict, audit = _run(monkeypatch, capsys, tmp_path)
    roles = verdict.drop_duplicates("module").set_index("module")["role"]
    assert roles["model.layers.0.block_sparse_moe.router"] == "router"
    assert roles["model.layers.0.block_sparse_moe.router.(softmax)"] == "routing"  # never attention
    a = audit.set_index("parameter")
    router = a.loc["model.layers.0.block_sparse_moe.router.weight"]
    assert router["class"] == "output-like" and router["lr_exponent"] == pytest.approx(-1, abs=0.05)  # measured
    assert router["init_exponent"] == pytest.approx(-1, abs=0.05)  # init=mup: std ∝ 1/fan_in
    experts = a.loc["model.layers.0.block_sparse_moe.experts.gate_up_proj"]
    assert (experts["class"], experts["grows"]) == ("hidden", "dims 1, 2 of 3")
    assert report["status"] == "pass", report["reason"]  # Granite's knobs + mup_groups + init=mup: muP


@pytest.mark.slow
def test_granitemoe_router_left_at_its_config_std_is_named_with_the_routers_fix(monkeypatch, capsys, tmp_path):
    pytest.importorskip("transformers")
    report, _, _ = _run(monkeypatch, capsys, tmp_path, "init=none")  # every weight at initializer_range 0.02
    assert report["status"] == "fail"
    by_router = [c for c in report["causes"] if any(".router" in m for m in c["modules"])]
    said = "\n".join(c["line"] for c in report["causes"])
    assert by_router and all("output weight" in c["fix"] for c in by_router), said
    assert all(c["kind"] != "attention_scale" for c in report["causes"])


def test_the_auxiliary_losses_are_in_the_models_loss():
    from mup import set_base_shapes

    torch.manual_seed(0)
    m = set_base_shapes(moe(64, n_layer=2, balance_loss=0.5, z_loss=0.25), None)  # MuReadouts need base shapes
    idx = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        logits, loss = m(idx, idx)
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx.flatten())
    aux = sum(0.5 * b.moe.balance + 0.25 * b.moe.z for b in m.blocks)
    assert float(loss) == pytest.approx(float(ce + aux)) and float(aux) > 0
    assert 1.0 <= float(m.blocks[0].moe.balance) <= 8.0  # n * sum f P: 1 when balanced, n when collapsed
    with pytest.raises(Exception, match="loss coefficients"):
        moe(64, z_loss=-1)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["correct", "router lr scaled like a hidden matrix"])
def test_the_known_answers_hold_with_the_auxiliary_losses_in_the_loss(fault):
    model_kw, opt_kw, (kind, planted) = FAULTS[fault]
    v = coord_check(builder(**model_kw, balance_loss=0.01, z_loss=0.001), WIDTHS, parametrization="mup",
                    optimizer=functools.partial(planted_moe_optimizer, **opt_kw), loss="model",
                    forward_targets=True, output=0, **QUICK).verdict
    if not planted:
        assert v.status == "pass", v.reason
        return
    assert v.status == "fail" and {m for ms in v.causes["modules"] for m in ms} == set(planted), v.causes


def test_what_is_not_a_router_or_an_expert_stack():
    # a convolution's out x in x k and a (1, 1, width) token are not stacks of hidden matrices
    assert param_class(dim_growth({64: [10, 64, 3], 128: [10, 128, 3]}))[0] == "output-like"
    assert param_class(dim_growth({64: [1, 1, 64], 128: [1, 1, 128]}))[0] == "other"

    class Head(torch.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.norm, self.fc = torch.nn.LayerNorm(width), torch.nn.Linear(width, 10)

    def build(width):  # a readout in a head block of its own: nn.Sequential(block, block, head)
        return torch.nn.Sequential(_Block(width), _Block(width), Head(width))

    model = build(128)
    found = routers(model, width_infshapes(model, build, 64, who="test"))
    assert found == {"0.router.weight", "1.router.weight"}  # the blocks repeat the router; the head's fc is alone


def test_a_norm_after_the_readout_keeps_it_the_models_output():
    from coordcheck.judge.roles import decide_roles
    from synthetic import make_frame

    series = {("fc", "hidden", "out"): 0.0, ("head", "output", "out"): 0.0, ("bn", "norm", "out"): 0.0}
    ops = {"fc": {"op": "linear", "declared": None}, "head": {"op": "linear", "declared": None},
           "bn": {"op": "norm", "declared": None}}
    facts = [{"config_id": "cfg", "width": w, "modules": ops,
              "shapes": {"fc.weight": [w, w], "head.weight": [10, w], "bn.weight": [10]}} for w in (64, 128, 256)]
    r = decide_roles(make_frame(series, widths=(64, 128, 256)), facts).set_index("module")
    assert r.loc["head", "role"] == "output"


def test_a_one_layer_moes_router_is_still_a_router():
    def build(width):
        return torch.nn.Sequential(torch.nn.Linear(16, width), _Block(width), torch.nn.Linear(width, 10))

    model = build(128)
    assert routers(model, width_infshapes(model, build, 64, who="test")) == {"1.router.weight"}


# -- the routing's health: the load over the experts --------------------------------------------------------------

class _BiasedRouter(torch.nn.Module):
    """Four experts, top-2, a bias that sends every token to experts 0 and 1 (a collapsed router)."""

    def __init__(self):
        super().__init__()
        self.gate = torch.nn.Linear(8, 4)
        with torch.no_grad():
            self.gate.weight.zero_()
            self.gate.bias.copy_(torch.tensor([3.0, 2.0, 0.0, 0.0]))

    def forward(self, x):
        gates, index = self.gate(x).softmax(-1).topk(2, dim=-1)
        return x * gates.sum(-1, keepdim=True)


class _TwoRouters(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = _BiasedRouter(), _BiasedRouter()
        with torch.no_grad():
            self.b.gate.weight.normal_()
            self.b.gate.bias.zero_()

    def forward(self, x):
        torch.topk(x, 2)  # a top-k in the model's own forward: no router's
        return self.b(self.a(x)).sum()


def test_a_routers_choice_of_experts_is_counted_exactly():
    from coordcheck.record.probes import Probes

    model = _TwoRouters()
    with Probes(model) as probes:
        probes.begin_step(0)
        rec = probes.end_step(model(torch.randn(64, 8)))
    assert set(rec.loads) == {"a.(load)", "b.(load)"}  # the root's top-k is not a router's
    max_load, entropy = rec.loads["a.(load)"]
    assert max_load == pytest.approx(2.0) and entropy == pytest.approx(0.5)  # shares 1/2, 1/2, 0, 0: E/k; log 2/log 4
    max_load, entropy = rec.loads["b.(load)"]
    assert 1.0 <= max_load < 2.0 and 0.5 < entropy <= 1.0
    assert probes.layout["a.(load)"][1] == "routing" and probes.modules["a.(load)"]["op"] == "load"


def test_the_built_in_moe_records_each_routers_load_per_step():
    f = coord_check(moe, WIDTHS, steps=2, seeds=1, progress=False).frame
    load = f[f["tensor"] == "load"]
    assert set(load["module"]) == {"blocks.0.moe.router.(load)", "blocks.1.moe.router.(load)"}
    assert set(load["role"]) == {"routing"} and set(load["stat"]) == {"max_load", "entropy"}
    assert len(load) == 2 * 2 * 3 * len(WIDTHS)  # routers x statistics x steps x widths
    m, e = load[load["stat"] == "max_load"]["value"], load[load["stat"] == "entropy"]["value"]
    assert m.between(1.0, 8 / 2).all() and e.between(0.0, 1.0).all()  # 8 experts, top-2


@pytest.mark.slow
def test_standard_parametrization_collapses_the_routing_with_width_and_mup_does_not():
    widths, run = [64, 128, 256, 512], dict(steps=8, seeds=2, progress=False)
    sp = coord_check(moe, widths, parametrization="sp", **run).verdict.series
    load = sp[sp["tensor"] == "load"]
    failed = load[load["status"] == "fail"]
    assert len(failed) and set(failed["rule"]) == {"routing-no-collapse"}, load[["module", "step", "slope", "status"]]
    # each collapse follows from its own router's cause (its logits not kept Θ(1): no 1/width multiplier), measured
    assert (failed["diagnosis"] == "follows from the cause " + failed["module"].str.replace(".(load)", ".gate")).all()
    mup = coord_check(moe, widths, **run).verdict
    load = mup.series[mup.series["tensor"] == "load"]
    assert len(load) and not (load["status"] == "fail").any(), load[["module", "step", "slope", "status"]]


# -- the number of experts as an axis (coordcheck.judge.experts) ----------------------------------------------------

EXPERTS_SWEEP = ["model=moe", "width=128", "experts=4,8,16", "steps=10", "seeds=2", "threads=1", "progress=false",
                 "report.figures=false"]


def _experts(monkeypatch, capsys, tmp_path, *overrides: str) -> dict:
    from conftest import run_in_process

    code = run_in_process(monkeypatch, *EXPERTS_SWEEP, *overrides, f"hydra.sweep.dir={tmp_path}", "--multirun")
    capsys.readouterr()
    assert code == 0
    return json.loads((tmp_path / "report" / "report.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("knobs, planted, words", [
    ((), None, None),
    (("model.renormalize=false",), "moe", "renormalise them over the top k"),  # gates ≈ k/E: the layer shrinks
    (("granularity=true",), "moe.experts", "each expert's update shrinks"),  # experts' fan_in shrinks, lr does not
], ids=["mup", "gates-not-renormalised", "granularity"])
def test_the_number_of_experts_as_an_axis_known_answers(monkeypatch, capsys, tmp_path, knobs, planted, words):
    report = _experts(monkeypatch, capsys, tmp_path, *knobs)
    e = report["experts"]
    assert e["width_status"] == "not judged (one width)"
    assert [(g["min_experts"], g["max_experts"]) for g in e["groups"]] == [(4, 16)]
    if planted is None:
        assert report["status"] == "pass" and e["status"] == "pass", report["reason"]
        return
    assert report["status"] == "fail" and words in report["reason"], report["reason"]
    failed = {s["module"] for s in e["series"] if s["status"] == "fail"}
    assert failed == {f"blocks.0.{planted}", f"blocks.1.{planted}"}, failed


def test_experts_needs_a_builder_that_takes_them(monkeypatch, capsys, tmp_path):
    from conftest import run_in_process

    code = run_in_process(monkeypatch, "model=mlp", "width=64", "experts=4,8", f"hydra.sweep.dir={tmp_path}",
                          "--multirun")
    err = capsys.readouterr().err
    assert code != 0 and "takes none of n_experts" in err and "Traceback" not in err


def test_the_python_api_sweeps_the_number_of_experts_too():
    result = coord_check(moe, width=64, experts=[2, 4, 8], steps=3, seeds=1, progress=False,
                         renormalize=False)
    assert sorted(result.frame["experts"].unique()) == [2, 4, 8] and result.frame["family_id"].nunique() == 1
    v = result.verdict
    assert v.experts is not None and v.width_status == "not judged (one width)"
    assert "renormalise them over the top k" in v.experts.reason  # the gates shrink like k/E at init
    from coordcheck.plot import plot_experts

    fig = plot_experts(result.frame, v.experts.series)
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["router logits", "expert change", "MoE layer",
                                                                     "load entropy ÷ step 0"]
    assert all(ax.get_xscale() == "log" for ax in fig.axes if ax.get_title())


# -- experts kept as a list of modules: one module per layer in the frame ---------------------------------------------

def test_a_list_of_experts_is_one_module_per_layer_unless_asked():
    run = dict(steps=2, seeds=1, progress=False, tensors=["out", "delta", "in", "own"])
    listed = functools.partial(moe, experts_as="list")
    pooled = coord_check(listed, WIDTHS, **run)
    acts = pooled.frame[pooled.frame["tensor"].isin(["out", "delta", "in", "own"])]
    names = {m for m in acts["module"].unique() if ".experts." in m}
    assert names == {f"blocks.{i}.moe.experts.*.fc{j}" for i in (0, 1) for j in (1, 2)}
    roles = pooled.verdict.roles.set_index("module")
    assert roles.loc["blocks.0.moe.experts.*.fc1", "role_from"] == "weight: width → width"
    each = coord_check(listed, WIDTHS, pool_experts=False, **run).frame
    each = each[each["tensor"].isin(["out", "delta", "in", "own"])]
    assert {m for m in each["module"].unique() if ".experts." in m} == {
        f"blocks.{i}.moe.experts.{e}.fc{j}" for i in (0, 1) for e in range(8) for j in (1, 2)}
    # the pooled statistics are the members' moments pooled exactly: the mean of the members' means at step 0
    mean = lambda f, m: f[(f["module"].str.match(m)) & (f["tensor"] == "out") & (f["stat"] == "mean")  # noqa: E731
                          & (f["step"] == 0) & (f["width"] == 64)]["value"]
    assert mean(pooled.frame, r"blocks\.0\.moe\.experts\.\*\.fc1$").iloc[0] == pytest.approx(
        mean(each, r"blocks\.0\.moe\.experts\.\d+\.fc1$").mean(), rel=1e-6)


@pytest.mark.slow
def test_a_planted_fault_in_a_list_of_experts_is_named_per_layer():
    v = coord_check(builder(experts_as="list"), WIDTHS, parametrization="mup",
                    optimizer=functools.partial(planted_moe_optimizer, unscaled_lr=("blocks.1.moe.experts",)),
                    **QUICK).verdict
    assert v.status == "fail"
    first = v.causes.sort_values("order").iloc[0]
    assert first["kind"] == "lr" and all(m.startswith("blocks.1.moe.experts.") for m in first["modules"])
    named = {m for ms in v.causes["modules"] for m in ms}
    assert named and all(m.startswith("blocks.1.moe.experts.") for m in named), named  # nothing in layer 0


@pytest.mark.slow
def test_granitemoe_across_the_number_of_experts_judges_its_fused_experts_as_the_layer(monkeypatch, capsys, tmp_path):
    pytest.importorskip("transformers")
    from conftest import run_in_process

    code = run_in_process(monkeypatch, "+experiment=granite_mup", "model.config=granitemoe", "width=128",
                          "experts=4,8,16", "seeds=2", "steps=6", "threads=1", "progress=false",
                          "report.figures=false", f"hydra.sweep.dir={tmp_path}", "--multirun")
    capsys.readouterr()
    assert code == 0
    e = json.loads((tmp_path / "report" / "report.json").read_text())["experts"]
    # its experts module returns the gated sum (no expert dimension): its change grows by capacity (+0.7), which
    # says nothing about one expert's update, so it is the layer, judged at init
    places = {s["module"]: s["place_kind"] for s in e["series"]}
    assert places["model.layers.0.block_sparse_moe.experts"] == "layer"
    assert places["model.layers.0.block_sparse_moe.router"] == "router"
    assert e["status"] == "pass", e["reason"]
