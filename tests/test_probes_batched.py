"""The batched reduction (the GPU path: a step's tensors reduced together at its end) gives the
per-hook reduction's numbers, here on the CPU where both paths run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from coordcheck.setup.data import tokens
from coordcheck.setup.models import gpt
from coordcheck.setup.parametrization import Mup, build_model
from coordcheck.record.probes import MOMENTS, Probes, batched_moments, moments
from coordcheck.run.train import cross_entropy


def test_batched_moments_equal_per_tensor_moments():
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, generator=g) * s + m for n, s, m in [(1, 1.0, 0.0), (7, 3.0, 5.0), (1000, 0.01, 100.0)]]
    xs.append(torch.full((50,), 2.5))  # a constant: variance exactly 0 through the shift
    got = batched_moments(xs, MOMENTS)
    want = torch.stack([moments(x, MOMENTS) for x in xs])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert got[3, MOMENTS.index("sumsq")] == 0


def records(model, x, y, batched, steps=3):
    out = []
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with Probes(model, batched=batched) as probes:
        for step in range(steps):
            probes.begin_step(step)
            loss = cross_entropy(model(x), y)
            rec = probes.end_step(loss)
            out.append((rec.keys, rec.moments))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return out


@pytest.mark.parametrize("case", ["gpt", "inplace_relu"])
def test_batched_probes_record_what_per_hook_probes_record(case):
    if case == "gpt":
        par = Mup()
        par.prepare(gpt, 32)
        b = tokens(batch_size=2, seq_len=16)
        make = lambda: build_model(gpt, 64, 0, par)  # noqa: E731
    else:  # ReLU(inplace=True) rewrites each Linear's output after its hook: the batched path snapshots it
        b = type("B", (), {"inputs": torch.randn(8, 16), "targets": torch.randint(0, 4, (8,))})

        def make():
            torch.manual_seed(0)
            return nn.Sequential(nn.Linear(16, 32), nn.ReLU(inplace=True), nn.Linear(32, 32), nn.ReLU(inplace=True),
                                 nn.Linear(32, 4))
    per_hook = records(make(), b.inputs, b.targets, batched=False)
    batched = records(make(), b.inputs, b.targets, batched=True)
    for (k1, m1), (k2, m2) in zip(per_hook, batched):
        assert k1 == k2
        np.testing.assert_allclose(m2, m1, rtol=2e-4, atol=1e-6)


def test_batched_is_the_default_on_cuda_only():
    assert Probes(nn.Linear(2, 2)).batched is False


def test_batched_probes_reduce_early_past_the_memory_budget(monkeypatch):
    import coordcheck.record.probes as probes_module

    par = Mup()
    par.prepare(gpt, 32)
    b = tokens(batch_size=2, seq_len=16)
    full = records(build_model(gpt, 64, 0, par), b.inputs, b.targets, batched=True)
    monkeypatch.setattr(probes_module, "BATCH_BUDGET", 5000)  # a few tensors per early reduction
    early = records(build_model(gpt, 64, 0, par), b.inputs, b.targets, batched=True)
    for (k1, m1), (k2, m2) in zip(full, early):
        assert k1 == k2
        np.testing.assert_allclose(m2, m1, rtol=1e-6, atol=1e-7)


class _TwoAttentions(nn.Module):
    """Fused attention with the head dimension fixed at 8 (heads grow with width) and nn.MultiheadAttention with
    4 heads (its head dimension grows with width)."""

    def __init__(self, width):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.mha = nn.MultiheadAttention(width, 4, batch_first=True)
        self.head = nn.Linear(width, 5)

    def forward(self, x):
        q, k, v = (t.unflatten(-1, (-1, 8)).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))  # (B, nh, T, 8)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).flatten(2)
        y, _ = self.mha(y, y, y, need_weights=False)
        return self.head(y)


@pytest.mark.parametrize("width", [16, 32, 64])
def test_both_paths_record_the_head_dimension_of_each_capture_alike(width):
    torch.manual_seed(0)
    x, y = torch.randn(2, 6, width), torch.randint(0, 5, (2, 6))
    seen = []
    for batched in (False, True):
        model = _TwoAttentions(width)
        with Probes(model, batched=batched) as probes:
            probes.begin_step(0)
            rec = probes.end_step(cross_entropy(model(x), y))
        seen.append(rec.head_dims)
    assert seen[0] == seen[1] == {"(sdpa)": 8, "mha.(mha)": width // 4}
