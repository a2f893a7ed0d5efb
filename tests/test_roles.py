"""Roles from measured facts (coordcheck.judge.roles), and the ops the probes record for them (coordcheck.record)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from synthetic import make_frame
from torch import nn

from coordcheck.judge.roles import INSIDE, RECORDED, decide_roles, with_roles
from coordcheck.judge.verdict import judge
from coordcheck.record.probes import Probes

WIDTHS = (64, 128, 256, 512)


def _facts(modules: dict[str, dict], shapes: dict[str, callable]) -> list[dict]:
    """One job's facts per width: the recorded modules' ops and the parameter shapes ``shapes[name](width)``."""
    return [{"config_id": "cfg", "width": w, "modules": modules, "shapes": {n: f(w) for n, f in shapes.items()}}
            for w in WIDTHS]


def _roles(series, modules, shapes):
    frame = make_frame(series, widths=WIDTHS)
    return decide_roles(frame, _facts(modules, shapes)).set_index("module")


def test_a_linear_layer_is_what_its_weight_says_whatever_its_name_or_place():
    series = {("scores", "attention", "out"): 0.0, ("wte", "input", "out"): 0.0, ("router", "hidden", "out"): 0.0,
              ("fc", "hidden", "out"): 0.0, ("head", "output", "out"): 0.0}
    ops = {n: {"op": op, "declared": None} for n, op in
           (("scores", "linear"), ("wte", "embedding"), ("router", "linear"), ("fc", "linear"), ("head", "linear"))}
    shapes = {"scores.weight": lambda w: [w, w], "wte.weight": lambda w: [256, w], "router.weight": lambda w: [8, w],
              "fc.weight": lambda w: [4 * w, w], "head.weight": lambda w: [256, w]}
    r = _roles(series, ops, shapes)
    assert r.loc["scores", "role"] == "hidden" and r.loc["scores", "recorded"] == "attention"  # a name decides nothing
    assert r.loc["scores", "role_from"] == "weight: width → width"
    # width → fixed before other roles' modules run: a router, not the readout (which runs last)
    assert (r.loc["router", "role"], r.loc["router", "role_from"]) == INSIDE["weight"]
    assert (r.loc["wte", "role"], r.loc["wte", "role_from"]) == ("input", "op: embedding")
    assert r.loc["fc", "role"] == "hidden" and r.loc["head", "role"] == "output"


def test_a_weight_stored_in_out_is_read_the_other_way_round():
    series = {("proj", "hidden", "out"): 0.0, ("c_fc", "hidden", "out"): 0.0}  # c_fc runs last: the model's output
    ops = {"c_fc": {"op": "linear-t", "declared": None}, "proj": {"op": "linear-t", "declared": None}}
    shapes = {"c_fc.weight": lambda w: [w, 8], "proj.weight": lambda w: [8, w]}  # Conv1D: (in, out)
    r = _roles(series, ops, shapes)
    assert r.loc["c_fc", "role"] == "output" and r.loc["proj", "role"] == "input"


def test_captures_by_op_declared_roles_win_and_the_rest_keep_their_place():
    series = {("attn.(softmax)", "attention", "out"): 0.0, ("router.(softmax)", "attention", "out"): 0.0,
              ("blk", "hidden", "out"): 0.0, ("gate", "hidden", "out"): 0.0, ("head", "output", "out"): 0.0}
    ops = {"attn.(softmax)": {"op": "qk-softmax", "declared": None}, "router.(softmax)": {"op": "softmax",
                                                                                         "declared": None},
           "blk": {"op": "", "declared": None}, "gate": {"op": "linear", "declared": "attention"},
           "head": {"op": "linear", "declared": None}}
    r = _roles(series, ops, {"gate.weight": lambda w: [w, w], "head.weight": lambda w: [10, w]})
    assert r.loc["attn.(softmax)", "role"] == "attention" and "q·kᵀ" in r.loc["attn.(softmax)", "role_from"]
    assert (r.loc["router.(softmax)", "role"], r.loc["router.(softmax)", "role_from"]) == INSIDE["softmax"]
    assert r.loc["head", "role"] == "output"  # the last output-like module is the model's readout, always
    assert (r.loc["blk", "role"], r.loc["blk", "role_from"]) == ("hidden", RECORDED)
    assert (r.loc["gate", "role"], r.loc["gate", "role_from"]) == ("attention", "declared (coordcheck_role)")


def test_frames_without_the_facts_keep_their_recorded_roles():
    frame = make_frame({("scores", "attention", "out"): 0.0, ("h", "hidden", "out"): 0.0}, widths=WIDTHS)
    roles = decide_roles(frame, [{"config_id": "cfg", "width": w} for w in WIDTHS])
    assert (roles["role"] == roles["recorded"]).all() and set(roles["role_from"]) == {RECORDED}
    assert with_roles(frame, roles) is frame


def test_the_verdict_judges_by_the_decided_role_and_says_what_decided_it():
    series = {("emb", "input", "out"): 0.0, ("emb", "input", "delta"): 0.0,
              ("router", "hidden", "out"): 0.0, ("router", "hidden", "delta"): 0.9,  # grows: a readout-like matrix
              ("fc", "hidden", "out"): 0.0, ("fc", "hidden", "delta"): 0.0,
              ("head", "output", "out"): 0.0, ("head", "output", "delta"): 0.0}
    ops = {n: {"op": op, "declared": None} for n, op in
           (("emb", "embedding"), ("router", "linear"), ("fc", "linear"), ("head", "linear"))}
    shapes = {"emb.weight": lambda w: [256, w], "router.weight": lambda w: [8, w], "fc.weight": lambda w: [w, w],
              "head.weight": lambda w: [256, w]}
    v = judge(make_frame(series, widths=WIDTHS), facts=_facts(ops, shapes))
    m = v.modules.set_index("module")
    assert (m.loc["router", "role"], m.loc["router", "role_from"]) == INSIDE["weight"]
    assert v.status == "fail" and "router logits grow" in m.loc["router", "diagnosis"]  # never the readout's cause
    s = v.series[(v.series["module"] == "router") & (v.series["tensor"] == "delta")]
    assert set(s["rule"]) == {"router-delta-flat"}
    assert m.loc["head", "role"] == "output"  # the readout, after everything else, stays the model's output


# -- the ops the probes record ---------------------------------------------------------------------------------------
class _Attention(nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        att = torch.einsum("btd,bsd->bts", q, k) / q.shape[-1]
        att = att.masked_fill(torch.ones(x.shape[1], x.shape[1]).tril() == 0, float("-inf"))
        return att.softmax(-1) @ v


class _Router(nn.Module):  # a raw weight and F.linear, as transformers' GraniteMoeTopKRouter
    def __init__(self, d: int = 16, experts: int = 4):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(experts, d) / d ** 0.5)

    def forward(self, y):
        top, _ = F.linear(y, self.weight).float().topk(2, dim=-1)
        return torch.softmax(top, dim=-1)


class _Conv1D(nn.Module):  # transformers' GPT-2 Conv1D: the weight stored (in, out), addmm
    def __init__(self, nx: int, nf: int):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.randn(nx, nf)), nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(*x.shape[:-1], -1)


class _Block(nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.attn, self.router, self.c_fc, self.proj = _Attention(d), _Router(d), _Conv1D(d, d), nn.Linear(d, d)

    def forward(self, x):
        y = self.c_fc(self.attn(x))
        return self.proj(y) * self.router(y)[..., :1]


def test_the_probes_record_each_modules_op_from_its_type_or_what_it_computes():
    torch.manual_seed(0)
    model, x = _Block(), torch.randn(2, 5, 16)
    with Probes(model) as p:
        for step in range(2):
            p.begin_step(step)
            rec = p.end_step(model(x).sum())
    ops = {name: info["op"] for name, info in rec.modules.items()}
    assert ops["attn.(softmax)"] == "qk-softmax"  # over q·kᵀ written with einsum, scaled and masked
    assert ops["router.(softmax)"] == "softmax"  # over a projection's top-k logits: not attention
    assert ops["router"] == "linear" and ops["c_fc"] == "linear-t" and ops["proj"] == "linear"
    assert ops["attn.qkv"] == "linear"


@pytest.mark.parametrize("declared", [None, "attention"])
def test_a_declared_role_is_recorded_as_such(declared):
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    if declared:
        model[0].coordcheck_role = declared
    with Probes(model) as p:
        p.begin_step(0)
        rec = p.end_step(model(torch.randn(3, 4)).sum())
    assert rec.modules["0"] == {"op": "linear", "declared": declared, "shape": [3, 4]}  # its output's, at step 0


def test_the_report_role_column_says_what_decided_it(tmp_path):
    import json

    from coordcheck.report import build_report, write_report

    series = {("emb", "input", "out"): 0.0, ("emb", "input", "delta"): 0.0, ("fc", "hidden", "out"): 0.0,
              ("fc", "hidden", "delta"): 0.0, ("head", "output", "out"): 0.0, ("head", "output", "delta"): 0.9}
    ops = {n: {"op": op, "declared": None} for n, op in (("emb", "embedding"), ("fc", "linear"), ("head", "linear"))}
    shapes = {"emb.weight": lambda w: [256, w], "fc.weight": lambda w: [w, w], "head.weight": lambda w: [256, w]}
    report = build_report(make_frame(series, widths=WIDTHS), facts=_facts(ops, shapes))
    path = write_report(report, tmp_path / "report", figures=False)
    md = path.read_text() if path.suffix == ".md" else (path.parent / "report.md").read_text()
    assert "| head | output (weight: width → fixed) |" in md
    modules = {m["module"]: m for m in json.loads((tmp_path / "report" / "report.json").read_text())["modules"]}
    assert modules["fc"]["role_from"] == "weight: width → width" and modules["head"]["rule"] == "output-delta-flat"
