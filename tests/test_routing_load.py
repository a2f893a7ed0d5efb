"""A router's load (``<router>.(load)``) for every router that chooses experts: a top-k in any form, grouped routers
(DeepSeek-V3's ``n_group`` / ``topk_group``: the load over the experts, not the groups), sigmoid routers, routers that
return the indices they chose (PhiMoE's); one line where a router's choice is not counted (record.load.Choices)."""

from __future__ import annotations

import functools
import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from coordcheck import coord_check
from coordcheck.core.frame import ROOT_MODULE
from coordcheck.record.load import load_stats
from coordcheck.record.probes import Probes

E, K, T, D = 8, 2, 64, 16  # experts, chosen per token, tokens, width


@torch.no_grad()
def _choose(s: torch.Tensor, k: int) -> torch.Tensor:
    return torch.topk(s, k, dim=-1)[1]


def _top_k_forms():
    """The ways people write a router's top-k over its scores ``s`` (T, E)."""
    return {
        "a @torch.no_grad helper": lambda s: _choose(s, K),
        "torch.topk positional": lambda s: torch.topk(s, K)[1],
        "torch.topk by keyword": lambda s: torch.topk(s, k=K, dim=-1, sorted=False).indices,
        "torch.topk input=": lambda s: torch.topk(input=s, k=K)[1],
        "Tensor.topk": lambda s: s.topk(K, dim=-1)[1],
        "Tensor.topk k=": lambda s: s.topk(k=K, largest=True).indices,
        "dim=1 of 2": lambda s: torch.topk(s, np.int64(K), dim=1)[1],  # a numpy integer k, a positive last dim
    }


class Router(nn.Module):
    """A router as a module: scores by softmax or sigmoid, the top-k written as ``choose`` says; returns the indices."""

    def __init__(self, choose, scores=F.softmax):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(E, D))
        self.choose, self.scores = choose, scores

    def forward(self, x):
        s = F.linear(x, self.weight)
        return self.choose(self.scores(s, dim=-1) if self.scores is F.softmax else self.scores(s))


class Layer(nn.Module):
    def __init__(self, router):
        super().__init__()
        self.gate, self.seen = router, []

    def forward(self, x):
        index = self.gate(x)
        self.seen.append(index)
        return x


def _record(model: nn.Module, x: torch.Tensor, steps: int = 1):
    with Probes(model) as probes:
        recs = []
        for step in range(steps):
            probes.begin_step(step)
            model(x)
            recs.append(probes.end_step(torch.zeros(())))
    return probes, recs


def _direct(*indices: torch.Tensor, experts: int = E) -> tuple[float, float]:
    return load_stats(sum(torch.bincount(i.reshape(-1), minlength=experts) for i in indices).numpy())


@pytest.mark.parametrize("scores", [F.softmax, torch.sigmoid], ids=["softmax", "sigmoid"])
@pytest.mark.parametrize("form", list(_top_k_forms()))
def test_every_form_of_top_k_counts_the_routers_choice_exactly(form, scores):
    model = Layer(Router(_top_k_forms()[form], scores))
    probes, (rec,) = _record(model, torch.randn(T, D))
    assert rec.loads["gate.(load)"] == pytest.approx(_direct(model.seen[0]))
    assert probes.layout["gate.(load)"][1] == "routing" and rec.notes == {}


def test_a_top_k_in_a_compiled_helper_is_counted():
    choose = torch.compile(_choose.__wrapped__, backend="eager")  # dynamo traces the helper with the probe's mode on
    model = Layer(Router(lambda s: choose(s, K)))
    _, recs = _record(model, torch.randn(T, D), steps=2)
    assert [rec.loads["gate.(load)"] for rec in recs] == [pytest.approx(_direct(i)) for i in model.seen]


class GroupedRouter(nn.Module):
    """DeepSeek-V3's routing as written in transformers: sigmoid scores plus a bias, the top-2 inside each of
    ``n_group`` groups summed, a top-``topk_group`` of the groups, then the top-k over the experts left."""

    def __init__(self, experts: int = 16, n_group: int = 4, topk_group: int = 2, top_k: int = 4):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(experts, D))
        self.bias = nn.Parameter(torch.zeros(experts))
        self.e, self.g, self.tg, self.k = experts, n_group, topk_group, top_k

    def forward(self, x):
        scores = F.linear(x, self.weight).sigmoid()
        choice = scores + self.bias
        group_scores = choice.view(-1, self.g, self.e // self.g).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=self.tg, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, self.g, self.e // self.g).reshape(-1, self.e)
        choice = choice.masked_fill(~score_mask.bool(), float("-inf"))
        return torch.topk(choice, k=self.k, dim=-1, sorted=False)[1]


def test_a_grouped_routers_load_is_over_its_experts_not_its_groups():
    model = Layer(GroupedRouter())
    model.gate.forward(torch.randn(T, D))  # (its groups' top-k alone would give 4 counts, its in-group top-2 ones 4)
    _, recs = _record(model, torch.randn(T, D), steps=2)
    for rec, index in zip(recs, model.seen):
        assert rec.loads["gate.(load)"] == pytest.approx(_direct(index, experts=16))


class TwiceRouted(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = Router(lambda s: torch.topk(s, K)[1])

    def forward(self, x):
        self.seen = [self.gate(x), self.gate(x * 2)]
        return x


def test_every_call_of_one_router_adds_up():
    model = TwiceRouted()
    _, (rec,) = _record(model, torch.randn(T, D))
    assert rec.loads["gate.(load)"] == pytest.approx(_direct(*model.seen))


class MaxRouter(nn.Linear):
    """PhiMoE's way: the experts chosen by ``max`` (first, then the best of the rest), returned beside the logits."""

    def __init__(self):
        super().__init__(D, E, bias=False)

    def forward(self, x):
        logits = super().forward(x)
        first = logits.max(dim=-1, keepdim=True)[1]
        second = logits.scatter(-1, first, float("-inf")).max(dim=-1, keepdim=True)[1]
        return logits, torch.cat([first, second], dim=-1)


class MaxLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = MaxRouter()

    def forward(self, x):
        _, self.index = self.router(x)
        return x


def test_a_router_that_returns_its_choice_without_a_top_k_is_counted():
    model = MaxLayer()
    _, recs = _record(model, torch.randn(T, D), steps=2)
    assert recs[1].loads["router.(load)"] == pytest.approx(_direct(model.index))
    assert all(rec.notes == {} for rec in recs)


class Experts(nn.Module):
    """Experts stored as 3-D stacks, called with the chosen indices (as transformers 5's experts are)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(E, D, D))

    def forward(self, x, index):
        return torch.einsum("td,tde->te", x, self.w[index[:, 0]])


class Unseen(nn.Module):
    """A block that chooses by argmax in its own forward and returns nothing of the choice: nothing to count."""

    def __init__(self, k: int = K, dim: int = -1):
        super().__init__()
        self.gate, self.experts, self.k, self.dim = nn.Linear(D, E, bias=False), Experts(), k, dim

    def forward(self, x):
        return self.experts(x, self.gate(x).argmax(dim=-1, keepdim=True))


class Dense(Unseen):
    def forward(self, x):
        index = torch.topk(self.gate(x).softmax(-1), self.k, dim=self.dim)[1]
        return x if self.dim != -1 else self.experts(x, index)


class AtTheRoot(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(D, E, bias=False)

    def forward(self, x):
        self.index = torch.topk(self.gate(x), K)[1]  # the routing in the model's own forward
        return x


class Holder(nn.Module):
    def __init__(self, moe: nn.Module):
        super().__init__()
        self.moe = moe

    def forward(self, x):
        return self.moe(x)


@pytest.mark.parametrize("model, module, words", [
    (Holder(Dense(k=E)), "moe", "takes all 8 of 8 candidates (k = 8): every token goes to every expert"),
    (Holder(Dense(k=K, dim=0)), "moe", "a top-k over dimension 0 of 2, not the last"),
    (Holder(Unseen()), "moe.experts", "its 8 experts are chosen by integer indices that no router the probes see"),
    (AtTheRoot(), ROOT_MODULE, "a top-k of 2 of 8 in the model's own forward, outside any module"),
], ids=["k=E", "dim 0", "argmax", "root"])
def test_a_router_whose_choice_is_not_counted_is_one_line_naming_it(model, module, words):
    _, recs = _record(model, torch.randn(T, D), steps=2)
    assert all(rec.loads == {} for rec in recs)
    assert list(recs[0].notes) == [module]
    assert words in recs[0].notes[module] and "\n" not in recs[0].notes[module]


# -- transformers' mixtures of experts ------------------------------------------------------------------------------

MOE_TINY = dict(num_hidden_layers=2, vocab_size=256, max_position_embeddings=64, use_cache=False)
RUN = dict(steps=2, seeds=1, progress=False, parametrization="sp")


def _hf(config: str, **kwargs):
    pytest.importorskip("transformers")
    from coordcheck.setup.hf import build

    return functools.partial(build, config=config, grows="heads", head_dim=16, config_kwargs={**MOE_TINY, **kwargs})


@pytest.mark.parametrize("config, kwargs, router", [
    ("olmoe", dict(num_experts=8, num_experts_per_tok=2), "mlp.gate"),
    ("qwen3_moe", dict(num_experts=8, num_experts_per_tok=2), "mlp.gate"),
    ("deepseek_v3", dict(n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=0,
                         kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16),
     "mlp.gate"),
])
def test_transformers_routers_get_a_load_per_moe_layer(config, kwargs, router):
    frame = coord_check(_hf(config, **kwargs), [32, 64, 128], **RUN).frame
    load = frame[frame["tensor"] == "load"]
    assert set(load["module"]) == {f"model.layers.{i}.{router}.(load)" for i in (0, 1)}
    assert len(load) == 2 * 2 * 3 * 3  # layers x statistics x steps x widths
    assert set(load["role"]) == {"routing"} and load["value"].between(0.0, 8 / 2).all()


def test_a_transformers_moe_with_top_k_of_every_expert_says_so_in_the_job_log(caplog):
    with caplog.at_level(logging.WARNING, logger="coordcheck"):
        frame = coord_check(_hf("olmoe", num_experts=8), [32, 64, 128], **RUN).frame  # OLMoE's top-8 of its 8
    assert not (frame["tensor"] == "load").any()
    lines = [r.getMessage() for r in caplog.records if "routing load not recorded" in r.getMessage()]
    assert len(lines) == 2 * 3  # each layer's router, once per job (width)
    assert "routing load not recorded for model.layers.0.mlp.gate: its top-k takes all 8 of 8" in lines[0]
