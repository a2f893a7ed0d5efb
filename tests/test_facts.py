"""Facts measured from the weights (coordcheck.record.weights) and judged (coordcheck.judge.facts): what training did
to each parameter — its update around the optimizer's own step, whatever set the lr — and each matrix module's
multiplier, wherever it lives; the effective init and update against muP's table by class and optimizer."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from mup import MuReadout, set_base_shapes
from torch import nn

from coordcheck.judge.facts import NO_RULE, audit_table, fit_points, measured_facts
from coordcheck.record.weights import POWER_STEPS, WeightFacts, measured_steps


class Scaled(nn.Linear):
    """A readout written as a Linear subclass that multiplies its own output (issue 42, case 2)."""

    def __init__(self, i: int, o: int, mult: float):
        super().__init__(i, o, bias=False)
        self.mult = mult

    def forward(self, x):
        return super().forward(x) * self.mult


class UnitLinear(nn.Linear):
    """u-μP's linear: the weight at std 1, 1/sqrt(fan_in) inside the op."""

    def forward(self, x):
        return F.linear(x, self.weight) / math.sqrt(self.in_features)


class Gelu(nn.Linear):
    """Not W x times a constant: no multiplier can be read off it."""

    def forward(self, x):
        return F.gelu(super().forward(x))


def _mlp(width: int, head: nn.Module | None = None) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                         head if head is not None else nn.Linear(width, 4))


def _train(model: nn.Module, opt: torch.optim.Optimizer, facts: WeightFacts, steps: int = 3, lrs=None) -> None:
    x, y = torch.randn(16, 8, generator=torch.Generator().manual_seed(1)), torch.arange(16) % 4
    facts.start()
    for t in range(steps + 1):
        facts.gains.begin(t, facts.measuring_forward(t))
        loss = F.cross_entropy(model(x), y)
        facts.gains.end()
        if t == steps:
            break
        facts.expect(t + 1)
        if lrs is not None:  # a loop that sets its lrs at the top of every iteration, from a group key
            for g in opt.param_groups:
                g["lr"] = lrs[t] * g["lr_mult"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        facts.settle()


def _frame(facts: WeightFacts, **identity) -> pd.DataFrame:
    layout = {name or "(root)": (i, "hidden", i) for i, (name, _) in enumerate(facts.model.named_modules())}
    ident = dict(config_id="c", model="m", parametrization="none", optimizer="x", lr=0.0, data="d",
                 data_policy="fixed", family_id="c", width=64, depth=0, experts=0, seed=0, **identity)
    return facts.frame(layout, ident)


def _value(df: pd.DataFrame, module: str, tensor: str, stat: str, step: int) -> float:
    r = df[(df["module"] == module) & (df["tensor"] == tensor) & (df["stat"] == stat) & (df["step"] == step)]
    assert len(r) == 1, (module, tensor, stat, step)
    return float(r["value"].iloc[0])


@pytest.mark.parametrize("kw", [{}, {"foreach": True}, {"fused": True}])
def test_adams_first_update_is_its_lr_per_coordinate_measured_around_its_own_step(kw):
    model = _mlp(32)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, **kw)
    facts = WeightFacts(model, [opt], steps=[1, 2, 3])
    _train(model, opt, facts)
    df = _frame(facts)
    # Adam's first step is lr·sign(g) on every coordinate whose gradient is not zero (ε = 1e-8 is negligible here)
    assert _value(df, "2.weight", "update", "rms", 1) == pytest.approx(1e-3, rel=1e-4)
    assert _value(df, "2.weight", "update", "lr", 2) == pytest.approx(1e-3)
    w = model[2].weight.detach()
    assert _value(df, "2.weight", "weight", "fro", 3) == pytest.approx(float(w.norm()), rel=1e-5)
    # power iteration approaches σ_max from below; a few percent low, by the same share at every width
    spec = float(torch.linalg.matrix_norm(w, 2))
    assert 0.95 * spec <= _value(df, "2.weight", "weight", "spec", 3) <= spec * (1 + 1e-5)


def test_a_decoupled_weight_decay_is_taken_out_of_the_step_it_is_judged_apart():
    model = _mlp(32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.5)
    facts = WeightFacts(model, [opt], steps=[1])
    _train(model, opt, facts, steps=1)
    df = _frame(facts)
    assert _value(df, "2.weight", "update", "rms", 1) == pytest.approx(1e-3, rel=1e-4)  # Adam's step alone
    assert _value(df, "2.weight", "update", "wd", 1) == 0.5


def test_lrs_set_inside_the_loop_are_what_the_update_and_its_label_show():
    """issue 42 case 1: every group built at the base lr, the width factor in a group key the loop multiplies in
    with the schedule at the top of each iteration — the recorder's lr at entering would say the base lr."""
    model = _mlp(32)
    groups = [dict(params=[model[2].weight], lr=1e-2, lr_mult=0.25), dict(params=[p for n, p in
              model.named_parameters() if n != "2.weight"], lr=1e-2, lr_mult=1.0)]
    opt = torch.optim.AdamW(groups, lr=1e-2, weight_decay=0.0)
    facts = WeightFacts(model, [opt], steps=[1, 2, 3])
    _train(model, opt, facts, lrs=[1e-3, 2e-3, 3e-3])
    df = _frame(facts)
    for step, lr in ((1, 1e-3), (2, 2e-3), (3, 3e-3)):
        assert _value(df, "2.weight", "update", "lr", step) == pytest.approx(lr * 0.25)
        assert _value(df, "0.weight", "update", "lr", step) == pytest.approx(lr)
    assert _value(df, "2.weight", "update", "rms", 1) == pytest.approx(1e-3 * 0.25, rel=1e-4)


def test_an_update_taken_through_a_closure_and_a_wrapper_is_measured_around_the_inner_step():
    """optimizer.step(closure), inside a wrapper that steps the torch optimizer itself (as Lightning's and
    Accelerate's do): the hooks sit on the optimizer that steps the weights."""
    model = _mlp(32)
    inner = torch.optim.SGD(model.parameters(), lr=0.05)

    class Wrapper:  # not a torch Optimizer: it hands the step on
        def __init__(self, opt):
            self.optimizer = opt

        def step(self, closure=None):
            return self.optimizer.step(closure)

    facts = WeightFacts(model, [inner], steps=[1])
    x, y = torch.randn(16, 8), torch.arange(16) % 4

    def closure():
        inner.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    facts.start()
    facts.expect(1)
    Wrapper(inner).step(closure)
    assert _value(_frame(facts), "2.weight", "update", "sgd_lr", 1) == pytest.approx(0.05, rel=1e-3)


def test_sgds_applied_lr_is_the_step_along_the_gradient_and_clipping_does_not_change_it():
    model = _mlp(32)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    facts = WeightFacts(model, [opt], steps=[1])
    x, y = torch.randn(16, 8), torch.arange(16) % 4
    facts.start()
    facts.expect(1)
    F.cross_entropy(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)  # a tiny clip: the step is lr times what is clipped
    opt.step()
    df = _frame(facts)
    assert _value(df, "2.weight", "update", "sgd_lr", 1) == pytest.approx(0.05, rel=1e-3)


def test_a_zero_update_leaves_the_next_updates_spectral_norm_measured():
    # a zero step (a schedule that starts at lr 0, Muon's momentum warmup, a matrix behind a zero-initialised readout)
    # leaves power iteration a zero vector: the next update's norm is estimated afresh, not read as zero
    model = _mlp(32)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for g in opt.param_groups:
        g["lr_mult"] = 1.0
    facts = WeightFacts(model, [opt], steps=[1, 2, 3])
    _train(model, opt, facts, lrs=[0.0, 1e-2, 1e-2])
    df = _frame(facts)
    assert _value(df, "2.weight", "update", "spec", 1) == 0.0
    for step in (2, 3):
        fro = _value(df, "2.weight", "update", "fro", step)
        assert fro > 0 and 0.3 * fro <= _value(df, "2.weight", "update", "spec", step) <= fro * (1 + 1e-5)


def test_without_an_optimizer_the_update_is_the_change_between_two_calls():
    model = _mlp(32)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    hooked, manual = WeightFacts(model, [opt], steps=[1, 2]), None
    _train(model, opt, hooked, steps=2)
    model2 = _mlp(32)
    opt2 = torch.optim.Adam(model2.parameters(), lr=1e-3)
    manual = WeightFacts(model2, [], steps=[1, 2])
    _train(model2, opt2, manual, steps=2)
    a, b = _frame(hooked), _frame(manual)
    for step in (1, 2):
        assert _value(b, "2.weight", "update", "rms", step) == pytest.approx(_value(a, "2.weight", "update", "rms",
                                                                                     step), rel=1e-6)
    assert b[(b["tensor"] == "update") & (b["stat"] == "lr")].empty  # no group to read a label from


@pytest.mark.parametrize("head, gain", [
    (lambda w: MuReadout(w, 4), None),  # mup's: output_mult / width_mult, read off set_base_shapes below
    (lambda w: Scaled(w, 4, 16 / w), "16/w"),  # a multiplier inside the readout's own forward
    (lambda w: UnitLinear(w, 4), "w^-1/2"),  # u-μP: 1/sqrt(fan_in) inside the op
    (lambda w: nn.Linear(w, 4), "1"),
])
def test_a_modules_multiplier_is_measured_wherever_its_forward_applies_it(head, gain):
    width = 64
    model = _mlp(width, head(width))
    if gain is None:
        base, delta = _mlp(16, MuReadout(16, 4)), _mlp(32, MuReadout(32, 4))
        set_base_shapes(model, base, delta=delta)
        expected = 1.0 / model[4].width_mult()
    else:
        expected = {"16/w": 16 / width, "w^-1/2": width ** -0.5, "1": 1.0}[gain]
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    facts = WeightFacts(model, [opt], steps=[1])
    _train(model, opt, facts, steps=1)
    df = _frame(facts)
    assert _value(df, "4", "gain", "gain", 0) == pytest.approx(expected, rel=1e-4)
    assert _value(df, "4", "gain", "fit", 1) == pytest.approx(1.0, abs=1e-6)
    assert _value(df, "2", "gain", "gain", 1) == pytest.approx(1.0, rel=1e-5)  # a plain Linear with a bias


def test_a_module_that_is_not_its_weight_times_a_constant_says_so():
    model = _mlp(64, Gelu(64, 4))
    facts = WeightFacts(model, [], steps=[])
    _train(model, torch.optim.SGD(model.parameters(), lr=0.0), facts, steps=1)
    assert _value(_frame(facts), "4", "gain", "fit", 0) < 0.99


def test_the_updates_to_measure_are_log_spaced_with_the_last():
    assert measured_steps(range(11)) == [1, 2, 5, 10]
    assert measured_steps([0, 1, 7]) == [1, 7]
    assert measured_steps(range(101)) == [1, 2, 5, 10, 20, 50, 100]
    assert POWER_STEPS >= 4


# -- judged: synthetic frames with the facts' rows --------------------------------------------------------------------

WIDTHS = (64, 128, 256)


def _rows(name, module, tensor, stat, values, steps=(1, 2, 3), seeds=(0,), order=1, role="hidden"):
    """Rows of one fact: ``values(width, step, seed)``."""
    return [dict(config_id="c", model="m", parametrization="none", optimizer="x", lr=0.0, data="d",
                 data_policy="fixed", family_id="c", width=w, depth=0, experts=0, seed=s, step=t, module=name,
                 layer_index=order, role=role, call_order=order, head_dim=0, tensor=tensor, stat=stat,
                 value=float(values(w, t, s))) for w in WIDTHS for t in steps for s in seeds]


def _param_rows(name, init, update, lr, order, role="hidden", gain=None, module=None):
    rows = _rows(name, "", "weight", "rms", init, steps=(0,), order=order, role=role)
    rows += _rows(name, "", "update", "rms", update, order=order, role=role)
    rows += _rows(name, "", "update", "lr", lr, order=order, role=role)
    if gain is not None:
        mod = module or name.rpartition(".")[0]
        rows += _rows(mod, "", "gain", "gain", gain, steps=(0, 1, 2, 3), order=order, role=role)
        rows += _rows(mod, "", "gain", "fit", lambda w, t, s: 1.0, steps=(0, 1, 2, 3), order=order, role=role)
    return rows


def _facts(params: dict) -> list[dict]:
    return [{"config_id": "c", "width": w, "audit": {"parametrization": "none", "params": {
        n: {"dims": dims(w), "family": fam, "embedding": emb, "owner": owner} for n, (dims, fam, emb, owner) in
        params.items()}}} for w in WIDTHS]


HIDDEN = ("h.weight", (lambda w: [w, w], "adam", False, "linear"))
EMBED = ("e.weight", (lambda w: [100, w], "adam", True, "embedding"))
HEAD = ("head.weight", (lambda w: [10, w], "adam", False, "linear"))


def _judge(rows, params) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    series = pd.DataFrame(columns=["config_id", "module", "role", "tensor", "call_order", "slope", "all_zero", "step"])
    return measured_facts(frame, _facts(params), series).set_index(["parameter", "quantity"])


def test_a_hidden_matrix_is_judged_on_its_effective_init_and_its_measured_update():
    rows = _param_rows("h.weight", lambda w, t, s: w ** -0.5, lambda w, t, s: 1e-2 * 64 / w * (0.9 ** t),
                       lambda w, t, s: 1e-2 * 64 / w, order=1, gain=lambda w, t, s: 1.0)
    f = _judge(rows, dict([HIDDEN]))
    assert f.loc[("h.weight", "init"), "exponent"] == pytest.approx(-0.5, abs=1e-6)
    assert f.loc[("h.weight", "init"), "status"] == "pass"
    assert f.loc[("h.weight", "lr"), "exponent"] == pytest.approx(-1.0, abs=1e-6)  # the schedule's offsets removed
    assert f.loc[("h.weight", "lr"), "status"] == "pass" and f.loc[("h.weight", "lr"), "class"] == "hidden"


def test_u_mup_a_unit_weight_behind_a_scale_in_the_op_is_muPs_init():
    """issue 42 case 5: std 1 at every width, 1/sqrt(fan_in) in the op: the effective init ∝ fan_in^-1/2."""
    rows = _param_rows("h.weight", lambda w, t, s: 1.0, lambda w, t, s: 1e-2 * (64 / w) ** 0.5,
                       lambda w, t, s: 1e-2 * (64 / w) ** 0.5, order=1, gain=lambda w, t, s: w ** -0.5)
    f = _judge(rows, dict([HIDDEN]))
    assert f.loc[("h.weight", "init"), "exponent"] == pytest.approx(-0.5, abs=1e-6)
    assert f.loc[("h.weight", "init"), "status"] == "pass"
    assert f.loc[("h.weight", "lr"), "exponent"] == pytest.approx(-1.0, abs=1e-6)
    assert f.loc[("h.weight", "mult"), "exponent"] == pytest.approx(-0.5, abs=1e-6)
    unscaled = _judge(_param_rows("h.weight", lambda w, t, s: 1.0, lambda w, t, s: 1e-2, lambda w, t, s: 1e-2,
                                  order=1, gain=lambda w, t, s: 1.0), dict([HIDDEN]))
    assert unscaled.loc[("h.weight", "init"), "status"] == "fail"  # the same weight without the scale: not muP


@pytest.mark.parametrize("init, update, mult, status", [
    (lambda w: 0.02, lambda w: 1e-2, lambda w: 64 / w, "pass"),  # MuReadout's form: constant init and lr, 1/width
    (lambda w: 0.02 * 64 / w, lambda w: 1e-2 * 64 / w, lambda w: 1.0, "pass"),  # no multiplier: both ∝ 1/fan_in
    (lambda w: 0.02, lambda w: 1e-2, lambda w: 1.0, "fail"),  # standard parametrization's readout
])
def test_the_readout_is_judged_on_its_effective_weight_whichever_form_it_takes(init, update, mult, status):
    rows = _param_rows("head.weight", lambda w, t, s: init(w), lambda w, t, s: update(w), lambda w, t, s: update(w),
                       order=5, role="output", gain=lambda w, t, s: mult(w))
    f = _judge(rows, dict([HEAD]))
    assert f.loc[("head.weight", "init"), "class"] == "output-like"
    got = {f.loc[("head.weight", q), "status"] for q in ("init", "lr")}
    assert got == {status} if status == "pass" else "fail" in got


def test_an_embedding_keeps_a_constant_init_and_lr():
    rows = _param_rows("e.weight", lambda w, t, s: 1.0, lambda w, t, s: 1e-2 * 64 / w, lambda w, t, s: 1e-2 * 64 / w,
                       order=0, role="input", gain=lambda w, t, s: 1.0)
    f = _judge(rows, dict([EMBED]))
    assert f.loc[("e.weight", "init"), "status"] == "pass" and f.loc[("e.weight", "init"), "class"] == "input-like"
    assert f.loc[("e.weight", "lr"), "status"] == "fail" and f.loc[("e.weight", "lr"), "direction"] == "shrinks"


def test_sgd_is_judged_on_the_applied_lr_at_the_first_update_and_muon_by_the_spectral_condition():
    sgd = {"h.weight": (lambda w: [w, w], "sgd", False, "linear")}
    rows = _rows("h.weight", "", "weight", "rms", lambda w, t, s: w ** -0.5, steps=(0,))
    rows += _rows("h.weight", "", "update", "sgd_lr", lambda w, t, s: 0.1 if t == 1 else 0.1 * w)  # momentum later
    rows += _rows("h.weight", "", "update", "lr", lambda w, t, s: 0.1)
    rows += _rows("h.weight", "", "update", "rms", lambda w, t, s: 1e-3 / w)  # how far the weights moved
    f = _judge(rows, sgd)
    assert f.loc[("h.weight", "lr"), "exponent"] == pytest.approx(0.0, abs=1e-6)  # MuSGD: constant for square
    assert f.loc[("h.weight", "lr"), "status"] == "pass"
    muon = {"h.weight": (lambda w: [w, 2 * w], "muon", False, "linear")}
    rows = _rows("h.weight", "", "weight", "rms", lambda w, t, s: w ** -0.5, steps=(0,))
    rows += _rows("h.weight", "", "update", "spec", lambda w, t, s: 0.02 * math.sqrt(0.5))  # ‖ΔW‖₂ ∝ √(fo/fi)
    f = _judge(rows, muon)
    assert f.loc[("h.weight", "lr"), "exponent"] == pytest.approx(0.0, abs=1e-6)
    assert f.loc[("h.weight", "lr"), "status"] == "pass"


def test_an_optimizer_the_harness_does_not_know_is_judged_by_the_spectral_condition():
    other = {"h.weight": (lambda w: [w, w], "Lion", False, "linear")}
    rows = _rows("h.weight", "", "weight", "rms", lambda w, t, s: w ** -0.5, steps=(0,))
    rows += _rows("h.weight", "", "update", "spec", lambda w, t, s: 1e-2 * w)  # grows: not width-invariant
    f = _judge(rows, other)
    assert f.loc[("h.weight", "lr"), "status"] == "fail" and "spectral" in f.loc[("h.weight", "lr"), "reason"]


def test_a_scans_vectors_are_measured_not_judged():
    params = {"m.scan.A_log": (lambda w: [w // 8], "adam", False, ""),
              "m.norm.weight": (lambda w: [w], "adam", False, "norm")}
    rows = _param_rows("m.scan.A_log", lambda w, t, s: 1.0, lambda w, t, s: 1e-2 * 64 / w, lambda w, t, s: 1e-2, 1)
    rows += _param_rows("m.norm.weight", lambda w, t, s: 1.0, lambda w, t, s: 1e-2, lambda w, t, s: 1e-2, 2)
    f = _judge(rows, params)
    assert set(f.loc["m.scan.A_log", "status"]) == {"not judged"} and set(f.loc["m.scan.A_log", "reason"]) == {NO_RULE}
    assert f.loc[("m.norm.weight", "lr"), "status"] == "pass"


def test_the_fit_removes_each_steps_offset_and_a_label_is_exact():
    w = np.array([64, 128, 256] * 3, dtype=float)
    g = np.repeat([1, 2, 3], 3)
    v = (w / 64.0) ** -1.0 * np.array([1.0, 3.0, 9.0])[g - 1]
    slope, lo, hi = fit_points(w, v, g)
    assert slope == pytest.approx(-1.0) and lo == pytest.approx(-1.0) and hi == pytest.approx(-1.0)
    assert fit_points(np.array([64.0, 128.0]), np.array([1.0, 0.5]), exact=True) == (-1.0, -1.0, -1.0)


def test_the_table_has_one_row_per_parameter_with_its_quantities():
    rows = _param_rows("h.weight", lambda w, t, s: w ** -0.5, lambda w, t, s: 1e-2 * 64 / w,
                       lambda w, t, s: 1e-2 * 64 / w, order=1, gain=lambda w, t, s: 1.0)
    frame = pd.DataFrame(rows)
    series = pd.DataFrame(columns=["config_id", "module", "role", "tensor", "call_order", "slope", "all_zero", "step"])
    t = audit_table(measured_facts(frame, _facts(dict([HIDDEN])), series))
    assert list(t["parameter"]) == ["h.weight"]
    assert t["init_status"].iloc[0] == "pass" and t["lr_exponent"].iloc[0] == pytest.approx(-1.0)


# -- measured in real training: the built-in models, standard parametrization, Muon ---------------------------------

from coordcheck.app.api import coord_check  # noqa: E402
from coordcheck.record.param_facts import param_facts  # noqa: E402
from coordcheck.report.compliance import build_report, write_report  # noqa: E402
from coordcheck.setup.models import gpt, mlp  # noqa: E402
from coordcheck.setup.parametrization import Mup, build_model  # noqa: E402

REAL = (64, 128, 256)


def _measured(build, parametrization="mup", optimizer="adam", **kw) -> pd.DataFrame:
    torch.set_num_threads(1)
    r = coord_check(build, list(REAL), parametrization=parametrization, optimizer=optimizer, steps=3, seeds=1,
                    base_width=64, progress=False, device="cpu", **kw)
    return r.verdict.audit


@pytest.mark.parametrize("build, optimizer", [(gpt, "adam"), (mlp, "adam"), (mlp, "sgd"), (gpt, "adamw")])
def test_the_built_in_models_facts_are_muPs_under_mup(build, optimizer):
    a = _measured(build, optimizer=optimizer)
    judged = a[a["quantity"].isin(["init", "lr"])]
    assert "fail" not in set(judged["status"]), judged.loc[judged["status"] == "fail",
                                                           ["parameter", "quantity", "exponent", "how"]]
    hidden = judged[(judged["class"] == "hidden") & (judged["quantity"] == "lr")]
    assert np.allclose(hidden["declared"], -1.0 if optimizer.startswith("adam") else 0.0)  # the lr labels
    readout = a[(a["class"] == "output-like") & (a["quantity"] == "mult")]
    assert readout["exponent"].to_numpy() == pytest.approx([-1.0] * len(readout), abs=1e-3)  # MuReadout's 1/width_mult
    assert len(readout)


def test_standard_parametrization_measures_the_hidden_lr_and_the_readouts_missing_multiplier():
    a = _measured(gpt, parametrization="sp")
    hidden = a[(a["class"] == "hidden") & (a["quantity"] == "lr")]
    assert len(hidden) == 12 and (hidden["status"] == "fail").all() and (hidden["direction"] == "grows").all()
    head = a[(a["parameter"] == "lm_head.weight")].set_index("quantity")
    assert head.loc["mult", "exponent"] == pytest.approx(0.0, abs=1e-3)


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="torch.optim.Muon is not in this torch")
@pytest.mark.parametrize("adjust, status, exponent", [("original", "pass", 0.0), ("match_rms_adamw", "fail", 0.5)])
def test_muons_update_is_judged_by_the_spectral_condition(adjust, status, exponent):
    from coordcheck.setup.optim import muon

    def opt(model, lr):
        return muon(model, lr, mu=True, adjust_lr_fn=adjust)

    a = _measured(mlp, optimizer=opt)
    hidden = a[(a["family"] == "muon") & (a["quantity"] == "lr")]
    assert len(hidden) == 2 and set(hidden["status"]) == {status}, hidden[["parameter", "exponent", "how"]]
    # measured at widths 64..256 with the exact ‖ΔW‖₂ (torch.linalg.matrix_norm): −0.04 and 0.46 (five Newton-Schulz
    # steps are not exactly orthogonal at these widths); power iteration on ΔW's flat spectrum adds up to 0.02
    assert hidden["exponent"].to_numpy() == pytest.approx([exponent] * 2, abs=0.08)


def test_weight_decay_is_a_declared_label_judged_into_a_note():
    from coordcheck.setup.optim import adamw

    def coupled_to_lr(model, lr):  # MuAdamW's lr scaling with λ left as given: lr·λ ∝ 1/width on hidden matrices
        opt = adamw(model, lr, mu=True, weight_decay=0.1)
        for g in opt.param_groups:
            g["weight_decay"] = 0.1
        return opt

    a = _measured(mlp, optimizer=coupled_to_lr)
    wd = a[(a["quantity"] == "wd") & (a["class"] == "hidden")]
    assert set(wd["wd_kind"]) == {"decoupled"} and np.allclose(wd["exponent"], -1.0) and set(wd["status"]) == {"fail"}


def test_param_facts_read_the_built_tensors_and_the_groups_as_labels():
    par = Mup()
    par.prepare(gpt, 32)
    model = build_model(gpt, 64, 0, par, 32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.5, eps=1e-6)
    f = param_facts(model, opt, "none")["params"]
    w = model.blocks[0].attn.c_k.weight
    assert f["blocks.0.attn.c_k.weight"]["std"] == pytest.approx(w.std().item(), rel=1e-6)
    assert f["wte.weight"]["embedding"] and not f["lm_head.weight"]["embedding"]
    assert f["wte.weight"]["family"] == "adamw" and f["wte.weight"]["eps"] == 1e-6


def test_the_report_writes_the_facts_table_and_links_it(tmp_path):
    torch.set_num_threads(1)
    r = coord_check(mlp, list(REAL), parametrization="sp", steps=2, seeds=1, base_width=64, progress=False,
                    device="cpu")
    report = build_report(r.frame, facts=r.facts)
    md = write_report(report, tmp_path, figures=False)
    table = pd.read_csv(tmp_path / "audit.csv")
    assert set(table["parameter"]) == set(r.facts[0]["audit"]["params"])
    assert "fail" in set(table.loc[table["class"] == "hidden", "lr_status"])
    assert "[audit.csv](audit.csv)" in md.read_text()
