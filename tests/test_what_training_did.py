"""Issue 42's five cases, rebuilt from their descriptions: a fact is measured from what training did, not read off
what the code declares — lrs set inside the loop, a multiplier inside the readout's own forward, ε and weight decay
with no symptom, a scale inside the op (u-μP). Each trains three widths through the path the issue names (the
recorder in a plain loop, or the sweep) and checks the answer."""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import coordcheck
from coordcheck.report.compliance import build_report
from coordcheck.report.runs import read_runs
from coordcheck.testing.hand_gpt import HandGPT

BASE = 64
WIDTHS = (64, 128, 256)
pytestmark = pytest.mark.slow


def tokens(seed: int, n: int = 8, t: int = 32, vocab: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randint(0, vocab, (n, t + 1), generator=torch.Generator().manual_seed(seed))
    return x[:, :-1], x[:, 1:]


def mup_init(model: nn.Module, width: int) -> None:
    """Hidden matrices at std fan_in^-1/2 (the docs' hand-made muP): everything but the embeddings and the head."""
    for name, p in model.named_parameters():
        if p.ndim == 2 and not name.startswith(("wte", "wpe", "head")):
            nn.init.normal_(p, std=width ** -0.5)


def hidden_and_rest(model: nn.Module) -> tuple[list, list]:
    hidden = [p for n, p in model.named_parameters() if p.ndim == 2 and not n.startswith(("wte", "wpe", "head"))]
    ids = {id(p) for p in hidden}
    return hidden, [p for p in model.parameters() if id(p) not in ids]


def judge_runs(root) -> object:
    runs = read_runs([root])
    return build_report(runs.frame, facts=runs.facts, jobs=runs.jobs).verdict


def loop(model: nn.Module, opt: torch.optim.Optimizer, width: int, out, steps: int = 10, fresh: bool = False,
         set_lrs=None, **facts) -> None:
    """A plain training loop, as a user writes one, with the recorder: ``set_lrs(opt, step)`` at the top of each
    iteration (a loop that sets its lrs itself), fresh batches or the probe batch."""
    x, y = tokens(0)
    with coordcheck.record(model, width=width, out=out, optimizer=opt, batch=(x[:4], y[:4]), **facts) as rec:
        for t in range(steps):
            if set_lrs is not None:
                set_lrs(opt, t)
            xb, yb = tokens(100 + t) if fresh else (x, y)
            loss = F.cross_entropy(model(xb).flatten(0, 1), yb.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            rec.step()


# -- 1. learning rates set inside the loop ----------------------------------------------------------------------------

def loop_lrs(opt: torch.optim.Optimizer, t: int, lr: float = 1e-2) -> None:
    """nanoGPT-mup's train.py: every group built at the base lr, its width factor in a group key, multiplied in with
    the schedule (a warmup here) at the top of each iteration."""
    for g in opt.param_groups:
        g["lr"] = lr * min(1.0, (t + 1) / 3) * g["lr_mult"]


def loop_lr_model(width: int, output_mult: bool = True) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = HandGPT(width, BASE, output_mult=output_mult)
    mup_init(model, width)
    hidden, rest = hidden_and_rest(model)
    opt = torch.optim.AdamW([dict(params=hidden, lr=1e-2, lr_mult=BASE / width),
                             dict(params=rest, lr=1e-2, lr_mult=1.0)], lr=1e-2, weight_decay=0.0)
    return model, opt


def test_lrs_set_inside_the_loop_are_measured_a_correct_model_passes(tmp_path):
    for w in WIDTHS:
        loop(*loop_lr_model(w), w, tmp_path / f"w{w}", set_lrs=loop_lrs)
    v = judge_runs(tmp_path)
    assert v.passed, v.reason
    lr = v.audit[(v.audit["class"] == "hidden") & (v.audit["quantity"] == "lr")]
    assert len(lr) == 8 and (lr["status"] == "pass").all()
    assert lr["declared"].round(2).eq(-1.0).all()  # the lr the loop set, read during the step


def test_lrs_set_inside_the_loop_a_readout_fault_is_named_alone(tmp_path):
    for w in WIDTHS:
        loop(*loop_lr_model(w, output_mult=False), w, tmp_path / f"w{w}", set_lrs=loop_lrs)
    v = judge_runs(tmp_path)
    assert v.status == "fail"
    first = v.causes.iloc[0]
    assert first["kind"] == "output_multiplier" and list(first["modules"]) == ["head"], first["line"]
    assert not (v.causes["kind"] == "lr").any(), list(v.causes["line"])  # no lr "fix" that would scale it twice


# -- 2. a multiplier inside the readout's own forward ---------------------------------------------------------------

class ScaledHead(nn.Linear):
    """A readout written as a Linear subclass that multiplies its own output by base_width / width."""

    def __init__(self, width: int, vocab: int, mult: float):
        super().__init__(width, vocab, bias=False)
        self.mult = mult
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.mult


def scaled_head_model(width: int, unscaled_hidden: bool = False) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = HandGPT(width, BASE, output_mult=False)
    model.head = ScaledHead(width, 256, BASE / width)
    mup_init(model, width)
    hidden, rest = hidden_and_rest(model)
    hidden_lr = 1e-2 if unscaled_hidden else 1e-2 * BASE / width
    return model, torch.optim.AdamW([dict(params=hidden, lr=hidden_lr), dict(params=rest, lr=1e-2)],
                                    weight_decay=0.0)


def test_a_multiplier_inside_the_readouts_forward_is_measured(tmp_path):
    for w in WIDTHS:
        loop(*scaled_head_model(w), w, tmp_path / f"w{w}")
    v = judge_runs(tmp_path)
    assert v.passed, v.reason
    mult = v.audit[(v.audit["parameter"] == "head.weight") & (v.audit["quantity"] == "mult")]
    assert mult["exponent"].item() == pytest.approx(-1.0, abs=1e-3)


def test_a_multiplier_inside_the_readouts_forward_is_never_asked_for_again(tmp_path):
    for w in WIDTHS:
        loop(*scaled_head_model(w, unscaled_hidden=True), w, tmp_path / f"w{w}")
    v = judge_runs(tmp_path)
    assert v.status == "fail" and v.causes["kind"].iloc[0] == "lr", v.reason
    assert not v.causes["kind"].isin(["output_multiplier"]).any(), list(v.causes["line"])


# -- 3. ε without a symptom ------------------------------------------------------------------------------------------

def test_eps_growing_with_width_and_no_series_out_of_tolerance_is_a_note_not_a_fail(tmp_path):
    """A correct hand-written muP GPT in a plain loop on fresh batches, ε recorded by default, ε large enough that its
    share grows with width: every judged series within tolerance, so PASS; ε is a note with its forecast."""
    for w in WIDTHS:
        torch.manual_seed(0)
        model = HandGPT(w, BASE)
        mup_init(model, w)
        hidden, rest = hidden_and_rest(model)
        opt = torch.optim.AdamW([dict(params=hidden, lr=3e-3 * BASE / w), dict(params=rest, lr=3e-3)], eps=1e-6,
                                weight_decay=0.0)
        loop(model, opt, w, tmp_path / f"w{w}", fresh=True)
    v = judge_runs(tmp_path)
    assert v.passed, v.reason
    assert not len(v.causes)
    assert any(n.startswith("Adam's ε ≥ 0.1·√v̂") and "forecast" in n for n in v.notes), v.notes


# -- 4. weight decay coupled to the lr, judged at step 10 -------------------------------------------------------------

def test_weight_decay_coupled_to_a_width_scaled_lr_is_a_forecast_not_a_fail():
    from coordcheck.setup.models import gpt
    from coordcheck.setup.optim import adamw

    def coupled(model: nn.Module, lr: float) -> torch.optim.Optimizer:
        opt = adamw(model, lr, mu=True, weight_decay=0.1)  # MuAdamW: lr / width_mult and λ × width_mult ...
        for g in opt.param_groups:
            g["weight_decay"] = 0.1  # ... λ left as given: lr·λ ∝ 1/width on the hidden matrices
        return opt

    torch.set_num_threads(1)
    r = coordcheck.coord_check(gpt, list(WIDTHS), optimizer=coupled, steps=10, seeds=2, base_width=BASE,
                               progress=False)
    v = r.verdict
    assert v.status != "fail" and not (v.causes["kind"] == "wd").any(), v.reason
    note = next(n for n in v.notes if "weight decay" in n and "hidden matrices" in n)
    assert "not a cause" in note and "Kosson" in note


# -- 5. a scale inside the op: u-μP -----------------------------------------------------------------------------------

class UnitScaled(nn.Module):
    """A small u-μP model from Graphcore's unit-scaling library: weights at std 1, 1/sqrt(fan_in) in each op, the
    readout's 1/fan_in in its op."""

    def __init__(self, width: int, vocab: int = 256):
        super().__init__()
        import unit_scaling as uu

        self.embed = uu.Embedding(vocab, width)
        self.fc1, self.fc2 = uu.Linear(width, width), uu.Linear(width, width)
        self.head = uu.LinearReadout(width, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        import unit_scaling.functional as U

        x = self.embed(idx)
        x = x + self.fc2(U.gelu(self.fc1(x)))
        return self.head(x)


def test_u_mup_weights_at_std_one_behind_a_scale_in_the_op_pass(tmp_path):
    pytest.importorskip("unit_scaling")
    import unit_scaling as uu

    for w in WIDTHS:
        torch.manual_seed(0)
        model = UnitScaled(w)
        opt = uu.optim.AdamW(model.parameters(), lr=3e-2)
        for g in opt.param_groups:  # muP's embedding rule (u-μP's own scales it by width^-1/2)
            if g["params"][0] is model.embed.weight:
                g["lr"] *= math.sqrt(w / BASE)
        loop(model, opt, w, tmp_path / f"w{w}")
    v = judge_runs(tmp_path)
    assert v.passed, v.reason
    a = v.audit.set_index(["parameter", "quantity"])
    assert a.loc[("fc1.weight", "init"), "declared"] == pytest.approx(0.0, abs=0.05)  # std 1 at every width ...
    assert a.loc[("fc1.weight", "init"), "exponent"] == pytest.approx(-0.5, abs=0.05)  # ... and fan_in^-1/2 in effect
    assert a.loc[("fc1.weight", "init"), "status"] == "pass"
    assert a.loc[("head.weight", "mult"), "exponent"] == pytest.approx(-1.0, abs=0.05)
    assert functools.reduce(lambda x, y: x and y, (a.xs("init", level=1)["status"] != "fail"))
