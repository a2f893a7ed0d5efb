import numpy as np
import pytest
import torch
from mup import MuReadout, set_base_shapes
from torch import nn
from torch.utils.checkpoint import checkpoint

from coordcheck.setup.models import gpt, mlp
from coordcheck.record.probes import Probes, StepRecord, first_tensor, moment_rows, moments, stats_from_moments

STATS = ["std", "l1", "rms", "mean", "absmax"]


def _stats(rec: StepRecord, module: str, tensor: str = "out") -> dict[str, float]:
    i = rec.keys.index((module, tensor))
    return dict(zip(STATS, stats_from_moments(rec.moments[i : i + 1], STATS)[0]))


def _probe_once(model, x, step=0, probes=None):
    probes = probes or Probes(model)
    probes.begin_step(step)
    out = model(x)
    rec = probes.end_step(out.float().mean())
    return probes, rec


@pytest.mark.parametrize("shape,shift", [((3, 5, 7), 0.0), ((1000,), 3.0), ((64, 33), -0.5)])
def test_moment_statistics_match_torch(shape, shift):
    x = torch.randn(shape) * 2 + shift
    m = moment_rows(np.array([x.numel()]), moments(x).double().numpy())
    got = dict(zip(STATS, stats_from_moments(m, STATS)[0]))
    assert got["std"] == pytest.approx(x.std().item(), rel=1e-4)
    assert got["l1"] == pytest.approx(x.abs().mean().item(), rel=1e-5)
    assert got["rms"] == pytest.approx(x.pow(2).mean().sqrt().item(), rel=1e-5)
    assert got["mean"] == pytest.approx(x.mean().item(), rel=1e-4, abs=1e-5)
    assert got["absmax"] == pytest.approx(x.abs().max().item())


def test_nonfinite_values_propagate():
    x = torch.tensor([1.0, float("nan"), 2.0])
    m = moment_rows(np.array([3]), moments(x).double().numpy())
    assert np.isnan(stats_from_moments(m, ["std"])[0, 0])


def test_first_tensor_of_nested_outputs():
    a, b = torch.ones(2), torch.zeros(2)
    assert first_tensor((torch.arange(3), (a, b))) is a
    assert first_tensor({"idx": torch.arange(2), "h": b}) is b
    assert first_tensor([torch.arange(2)]) is None


class TwiceShared(nn.Module):
    """One activation module called twice per forward."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.act = nn.Linear(4, 8), nn.Linear(8, 8), nn.Tanh()

    def forward(self, x):
        return self.act(self.fc2(self.act(self.fc1(x))))


def test_module_called_twice_is_pooled():
    model = TwiceShared()
    x = torch.randn(5, 4)
    _, rec = _probe_once(model, x)
    both = torch.cat([model.act(model.fc1(x)).flatten(), model.act(model.fc2(model.act(model.fc1(x)))).flatten()])
    s = _stats(rec, "act")
    assert rec.keys.count(("act", "out")) == 1
    assert s["mean"] == pytest.approx(both.mean().item(), abs=1e-6)
    assert s["std"] == pytest.approx(both.std().item(), rel=1e-5)


def test_sequential_root_and_alias_containers_are_not_duplicated():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    _, rec = _probe_once(model, torch.randn(2, 4))
    names = [m for m, t in rec.keys if t == "out"]
    assert names == ["0", "1", "2"]  # no "(root)": it returns its last child's output


class MultiplierAtRoot(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.body(x)) * 0.5  # a new tensor: the root is recorded


def test_root_with_its_own_computation_is_recorded_as_output():
    probes, rec = _probe_once(MultiplierAtRoot(), torch.randn(3, 4))
    assert ("(root)", "out") in rec.keys
    assert probes.layout["(root)"][1] == "output"
    assert probes.layout["head"][1] == "output" and probes.layout["body"][1] == "input"


def test_delta_is_change_since_step0_and_tuple_outputs():
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x), torch.arange(2)

    model = nn.Sequential(Pair())
    x = torch.randn(4, 3)
    probes = Probes(model)
    probes.begin_step(0)
    y0 = model(x)[0]
    probes.end_step(y0.sum())
    with torch.no_grad():
        model[0].fc.bias += 1.0
    probes.begin_step(1)
    y1 = model(x)[0]
    rec = probes.end_step(y1.sum())
    d = _stats(rec, "0.fc", "delta")
    assert d["mean"] == pytest.approx(1.0, rel=1e-6) and d["std"] == pytest.approx(0.0, abs=1e-6)


def test_checkpoint_recomputation_is_not_double_counted():
    class Ckpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
            self.head = nn.Linear(4, 1)

        def forward(self, x):
            return self.head(checkpoint(self.inner, x, use_reentrant=False))

    model = Ckpt()
    x = torch.randn(3, 4)
    probes = Probes(model)
    probes.begin_step(0)
    loss = model(x).sum()
    rec = probes.end_step(loss)
    loss.backward()  # recomputes self.inner: its hooks fire outside the probed forward
    assert probes._keys == rec.keys  # the recomputation in backward recorded nothing more
    i = rec.keys.index(("inner.0", "out"))
    assert rec.moments[i, 0] == 12  # n = 3 x 4, one call


def test_gpt_layout_block_depth_and_roles():
    model = gpt(64, n_layer=3)
    set_base_shapes(model, None)
    probes, rec = _probe_once(model, torch.randint(0, 256, (2, 8)))
    lay = {k: v[:2] for k, v in probes.layout.items()}
    assert lay["wte"] == (0, "input") and lay["wpe"] == (0, "input")
    assert lay["blocks.0.attn.c_k"] == (1, "hidden") and lay["blocks.2.mlp.c_fc"] == (3, "hidden")
    assert lay["blocks.1.attn.scores"] == (2, "attention")
    assert lay["blocks.0.ln_1"] == (1, "norm") and lay["ln_f"] == (4, "norm")
    assert lay["lm_head"] == (4, "output")
    assert "(root)" not in lay  # GPT returns lm_head's tensor itself
    assert "blocks.0.mlp" not in lay  # alias of blocks.0.mlp.c_proj


def test_mlp_layout_and_builder_override():
    model = mlp(16, depth=3)
    set_base_shapes(model, None)
    model.blocks[1].fc.coordcheck_role = "norm"  # a builder may override the rules
    probes, _ = _probe_once(model, torch.randn(4, 32))
    lay = {k: v[:2] for k, v in probes.layout.items()}
    assert lay["input.fc"] == (0, "input")
    assert lay["blocks.0.fc"] == (1, "hidden") and lay["blocks.1.fc"] == (2, "norm")
    assert lay["readout"] == (3, "output")


def test_probes_detach_and_leave_training_unchanged():
    torch.manual_seed(0)
    a = mlp(16)
    set_base_shapes(a, None)
    b = mlp(16)
    set_base_shapes(b, None)
    b.load_state_dict(a.state_dict())
    x = torch.randn(8, 32)
    probes = Probes(b)
    probes.begin_step(0)
    lb = b(x).pow(2).mean()
    probes.end_step(lb)
    la = a(x).pow(2).mean()
    la.backward()
    lb.backward()
    probes.remove()
    for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa.grad, pb.grad), n
    assert not b._forward_hooks and not b.readout._forward_hooks


def test_readout_is_mureadout():
    model = mlp(16)
    assert isinstance(model.readout, MuReadout)


# -- attention logits wherever they are computed; modules as a reader counts them -------------------


class FusedAttention(nn.Module):
    """nanoGPT-style attention through F.scaled_dot_product_attention (no module sees the logits)."""

    def __init__(self, d: int = 16, heads: int = 2, scale: float | None = None):
        super().__init__()
        self.heads, self.scale = heads, scale
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def qk(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        return [t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v)]  # (B, nh, T, hs)

    def forward(self, x):
        q, k, v = self.qk(x)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        return self.c_proj(y.transpose(1, 2).reshape(x.shape))


def _causal_logits(q, k, scale):
    T = q.shape[-2]
    full = (q @ k.transpose(-2, -1)) * scale
    return full[..., torch.ones(T, T, dtype=torch.bool).tril()]


@pytest.mark.parametrize("scale", [None, 1 / 8])
def test_fused_sdpa_logits_are_recorded_as_attention(scale):
    model = nn.Sequential(FusedAttention(scale=scale), nn.Linear(16, 4))
    x = torch.randn(3, 5, 16)
    probes, rec = _probe_once(model, x)
    assert probes.layout["0.(sdpa)"][1] == "attention"
    q, k, _ = model[0].qk(x)
    want = _causal_logits(q, k, scale if scale is not None else 8 ** -0.5)  # default: 1/sqrt(d_head)
    s = _stats(rec, "0.(sdpa)")
    assert rec.moments[rec.keys.index(("0.(sdpa)", "out")), 0] == want.numel()
    assert s["std"] == pytest.approx(want.std().item(), rel=1e-4)
    assert s["absmax"] == pytest.approx(want.abs().max().item(), rel=1e-5)


def test_multihead_attention_logits_are_recorded():
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    model = nn.Sequential()

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn, self.head = mha, nn.Linear(16, 3)

        def forward(self, x):
            return self.head(self.attn(x, x, x)[0])

    model = Wrap()
    x = torch.randn(2, 6, 16)
    probes, rec = _probe_once(model, x)
    assert probes.layout["attn.(mha)"][1] == "attention"
    w, b = mha.in_proj_weight, mha.in_proj_bias
    q = (x @ w[:16].T + b[:16]).view(2, 6, 4, 4).transpose(1, 2)
    k = (x @ w[16:32].T + b[16:32]).view(2, 6, 4, 4).transpose(1, 2)
    want = (q @ k.transpose(-2, -1)) / 2.0
    assert _stats(rec, "attn.(mha)")["std"] == pytest.approx(want.std().item(), rel=1e-4)


class HandAttention(nn.Module):
    """Functional attention with a -inf causal mask, as hand-written transformers do."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.q, self.k = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        T = x.shape[1]
        att = (self.q(x) @ self.k(x).transpose(-2, -1)) / x.shape[-1]
        att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        return torch.softmax(att, dim=-1) @ x


def test_softmax_input_of_hand_written_attention_leaves_out_masked_entries():
    model = nn.Sequential(HandAttention(), nn.Linear(8, 2))
    x = torch.randn(2, 4, 8)
    probes, rec = _probe_once(model, x)
    s = _stats(rec, "0.(softmax)")
    att = model[0].q(x) @ model[0].k(x).transpose(-2, -1) / 8
    want = att[..., torch.ones(4, 4, dtype=torch.bool).tril()]
    assert probes.layout["0.(softmax)"][1] == "attention"
    assert np.isfinite(s["std"]) and s["std"] == pytest.approx(want.std().item(), rel=1e-4)


def test_builtin_gpt_scores_are_not_recorded_twice():
    model = gpt(32, n_layer=2)
    set_base_shapes(model, None)
    probes, rec = _probe_once(model, torch.randint(0, 256, (2, 8)))
    assert "blocks.0.attn.scores" in probes.layout
    assert not [n for n in probes.layout if "(softmax)" in n]


class LogSoftmaxReadout(nn.Module):
    def __init__(self, mult: float | None = None):
        super().__init__()
        self.body, self.decoder, self.mult = nn.Linear(4, 16), nn.Linear(16, 5), mult

    def forward(self, x):
        h = self.decoder(torch.relu(self.body(x)))
        return torch.nn.functional.log_softmax(h if self.mult is None else h * self.mult, dim=-1)


def test_model_ending_in_log_softmax_judges_the_readout_not_the_log_probs():
    probes, rec = _probe_once(LogSoftmaxReadout(), torch.randn(3, 4))
    assert "(root)" not in probes.layout and "(logits)" not in probes.layout
    assert not [n for n in probes.layout if "softmax" in n]
    assert probes.layout["decoder"][1] == "output"


def test_log_softmax_of_computed_logits_records_the_logits():
    model = LogSoftmaxReadout(mult=0.25)
    x = torch.randn(3, 4)
    probes = Probes(model)
    for step in range(2):  # the name holds after step 0 too
        probes.begin_step(step)
        rec = probes.end_step(model(x).mean())
    assert probes.layout["(logits)"][1] == "output"
    assert probes.layout["(logits)"][2] > probes.layout["decoder"][2]  # the model's output: judged there
    want = model.decoder(torch.relu(model.body(x))) * 0.25
    assert _stats(rec, "(logits)")["std"] == pytest.approx(want.std().item(), rel=1e-5)
    assert ("(logits)", "delta") in rec.keys and "(root)" not in probes.layout


def test_identity_like_modules_are_not_rows():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.drop = nn.Linear(8, 8), nn.Dropout(0.0)
            self.id, self.shortcut = nn.Identity(), nn.Sequential()

        def forward(self, x):
            return self.id(self.drop(self.fc(x))) + self.shortcut(x)

    model = nn.Sequential(Block(), Block(), nn.Linear(8, 2))
    probes, rec = _probe_once(model, torch.randn(3, 8))
    names = {m for m, _ in rec.keys}
    assert not any(n.endswith((".drop", ".id", ".shortcut")) for n in names)
    assert {"0.fc", "0", "1.fc", "1", "2"} <= names


def test_constant_tensor_has_exactly_zero_std():
    for c in (0.1, 3.7, -2.3e-3):
        x = torch.full((100_000,), c)
        m = moment_rows(np.array([x.numel()]), moments(x).double().numpy())
        assert stats_from_moments(m, ["std"])[0, 0] == 0.0


class Stage(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv, self.bn, self.shortcut = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.Sequential()

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))) + self.shortcut(x)


class StagedNet(nn.Module):
    """ResNet-like: a stem, four stages of one block each, a head."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.layer1, self.layer2, self.layer3, self.layer4 = (nn.Sequential(Stage(4)) for _ in range(4))
        self.linear = nn.Linear(4, 10)

    def forward(self, x):
        x = self.layer4(self.layer3(self.layer2(self.layer1(self.conv1(x)))))
        return self.linear(x.mean((2, 3)))


def test_layer_index_follows_depth_through_stages():
    probes, _ = _probe_once(StagedNet(), torch.randn(2, 3, 8, 8))
    lay = probes.layout
    assert lay["conv1"][:2] == (0, "input")
    assert [lay[f"layer{i}.0.conv"][0] for i in range(1, 5)] == [1, 2, 3, 4]
    assert lay["linear"][:2] == (5, "output")


def test_layer_index_follows_blocks_in_a_module_dict():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 8)
            self.layers = nn.ModuleDict({str(i): nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for i in range(3)})
            self.out = nn.Linear(8, 10)

        def forward(self, idx):
            x = self.emb(idx)
            for layer in self.layers.values():
                x = x + layer(x)
            return self.out(x)

    probes, _ = _probe_once(Net(), torch.randint(0, 10, (2, 5)))
    lay = probes.layout
    assert [lay[f"layers.{i}.0"][0] for i in range(3)] == [1, 2, 3]
    assert lay["emb"][0] == 0 and lay["out"][0] == 4


def test_sdpa_with_a_float_mask_is_named_apart():
    class Biased(FusedAttention):
        def forward(self, x):
            q, k, v = self.qk(x)
            T = x.shape[1]
            bias = -torch.arange(T).float().view(1, T).abs()  # an ALiBi-like additive bias
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias.expand(T, T))
            return self.c_proj(y.transpose(1, 2).reshape(x.shape))

    probes, _ = _probe_once(nn.Sequential(Biased(), nn.Linear(16, 4)), torch.randn(2, 5, 16))
    assert probes.layout["0.(sdpa+mask)"][1] == "attention" and "0.(sdpa)" not in probes.layout


# -- the cheap paths (scratch buffers, the function probe off where it found nothing) change no number -------------

def _tiny_gpt():
    torch.manual_seed(0)
    model = gpt(32, n_layer=2)
    set_base_shapes(model, None)
    return model


class _InplaceNet(nn.Sequential):
    """ReLU(inplace=True) rewrites each Linear's output after its hook has reduced it."""

    def __init__(self):
        torch.manual_seed(0)
        super().__init__(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 16), nn.ReLU(inplace=True),
                         nn.Linear(16, 3))


def _train(model, x, steps=3, **probe_kw):
    """The records of ``steps`` Adam updates on a fixed batch (None: no probes) and the parameters after them."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    probes = None if probe_kw.get("tensors") == "none" else Probes(model, **probe_kw)
    records = []
    for step in range(steps + 1):
        if probes is not None:
            probes.begin_step(step)
        loss = model(x).float().square().mean()
        if probes is not None:
            records.append(probes.end_step(loss))
        opt.zero_grad()
        loss.backward()
        opt.step()
    if probes is not None:
        probes.remove()
    return records, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("make,x", [(_tiny_gpt, torch.randint(0, 256, (2, 8))), (_InplaceNet, torch.randn(4, 8))])
@pytest.mark.parametrize("kw", [{}, {"tensors": ("out",), "stats": ("l1",)}])
def test_probes_leave_training_bit_identical(make, x, kw):
    _, bare = _train(make(), x, tensors="none")
    _, probed = _train(make(), x, **kw)
    assert all(torch.equal(a, b) for a, b in zip(bare, probed))


def test_inplace_ops_after_the_hook_do_not_reach_the_recorded_moments():
    model, x = _InplaceNet(), torch.randn(4, 8)
    with torch.no_grad():
        model[0].bias[0] = -10.0  # the first element (the shift) is negative: the ReLU overwrites it
    pre = model[0](x).detach()  # the first Linear's output before the ReLU
    records, _ = _train(model, x, steps=0)
    assert pre[0, 0] < 0
    got = _stats(records[0], "0")
    assert got["mean"] == pytest.approx(pre.mean().item(), rel=1e-5)
    assert got["std"] == pytest.approx(pre.std().item(), rel=1e-5)


def test_tensors_past_the_scratch_size_reduce_to_the_same_numbers(monkeypatch):
    import coordcheck.record.probes as probes_module

    x = torch.randint(0, 256, (2, 8))
    scratch, _ = _train(_tiny_gpt(), x)
    monkeypatch.setattr(probes_module, "SCRATCH_MAX", 0)  # every temporary freshly allocated, as before the buffers
    fresh, _ = _train(_tiny_gpt(), x)
    for a, b in zip(scratch, fresh):
        assert a.keys == b.keys and np.array_equal(a.moments, b.moments, equal_nan=True)


class _MhaWrap(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.head = nn.MultiheadAttention(16, 4, batch_first=True), nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.attn(x, x, x)[0])


@pytest.mark.parametrize("make,x,seen", [
    (_tiny_gpt, torch.randint(0, 256, (2, 8)), False),  # its scores module exposes the logits: nothing to capture
    (lambda: nn.Sequential(FusedAttention(), nn.Linear(16, 4)), torch.randn(2, 5, 16), True),
    (lambda: nn.Sequential(HandAttention(), nn.Linear(8, 2)), torch.randn(2, 4, 8), True),
    (_MhaWrap, torch.randn(2, 6, 16), True),
    (lambda: LogSoftmaxReadout(), torch.randn(3, 4), True),  # the root is left out at every step
    (lambda: LogSoftmaxReadout(mult=0.25), torch.randn(3, 4), True),
])
def test_every_step_records_what_step_0_recorded(monkeypatch, make, x, seen):
    from coordcheck.record.capture import FunctionProbe

    calls = []
    original = FunctionProbe.__torch_function__

    def counted(self, func, types, args=(), kwargs=None):
        calls.append(self.probes.step)
        return original(self, func, types, args, kwargs)

    monkeypatch.setattr(FunctionProbe, "__torch_function__", counted)
    records, _ = _train(make(), x)
    first = {k for k in records[0].keys if k[1] == "out"}
    for rec in records[1:]:
        assert {k for k in rec.keys if k[1] == "out"} == first
        assert {k for k in rec.keys if k[1] in ("in", "own")} == {k for k in records[0].keys if k[1] in ("in", "own")}
        assert {m for m, t in rec.keys if t == "delta"} == {m for m, _ in first}
    assert 0 in calls and (1 in calls) == seen  # the function probe is off after step 0 only where it saw nothing


def test_delta_of_a_bf16_model_is_taken_in_float32():
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)).to(torch.bfloat16), torch.randn(4, 8).bfloat16()
    y0 = model[0](x).float()
    probes = Probes(model)
    probes.begin_step(0)
    probes.end_step(model(x).float().sum())
    with torch.no_grad():
        model[0].weight.mul_(1.5)
    probes.begin_step(1)
    rec = probes.end_step(model(x).float().sum())
    want = model[0](x).float() - y0
    got = _stats(rec, "0", "delta")
    assert got["std"] == pytest.approx(want.std().item(), rel=1e-5)
    assert got["absmax"] == pytest.approx(want.abs().max().item(), rel=1e-6)


@pytest.mark.parametrize("make,x,kept", [
    (_tiny_gpt, torch.randint(0, 256, (2, 8)), False),  # nothing for the function probe: the stack is not kept
    (lambda: nn.Sequential(FusedAttention(), nn.Linear(16, 4)), torch.randn(2, 5, 16), True),
])
def test_the_module_stack_pre_hooks_run_only_while_the_function_probe_does(make, x, kept):
    model = make()
    probes = Probes(model)
    pre = lambda: sum(len(m._forward_pre_hooks) for m in model.modules())  # noqa: E731
    n = len(list(model.modules()))
    assert pre() == n  # step 0: the stack is kept for the function probe
    for step in range(3):
        probes.begin_step(step)
        probes.end_step(model(x).float().square().mean())
    assert pre() == (n if kept else 0)
    probes.begin_step(0)  # a new step 0 sees the functions again
    assert pre() == n
    probes.end_step(model(x).float().square().mean())
    probes.remove()
    assert pre() == 0 and sum(len(m._forward_hooks) for m in model.modules()) == 0
