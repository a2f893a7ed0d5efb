import numpy as np
import pytest
import torch
from mup import MuReadout, set_base_shapes
from torch import nn
from torch.utils.checkpoint import checkpoint

from coordcheck.models import gpt, mlp
from coordcheck.probes import Probes, StepRecord, first_tensor, moments, stats_from_moments

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
    m = np.concatenate([[x.numel()], moments(x).double().numpy()])[None]
    got = dict(zip(STATS, stats_from_moments(m, STATS)[0]))
    assert got["std"] == pytest.approx(x.std().item(), rel=1e-4)
    assert got["l1"] == pytest.approx(x.abs().mean().item(), rel=1e-5)
    assert got["rms"] == pytest.approx(x.pow(2).mean().sqrt().item(), rel=1e-5)
    assert got["mean"] == pytest.approx(x.mean().item(), rel=1e-4, abs=1e-5)
    assert got["absmax"] == pytest.approx(x.abs().max().item())


def test_nonfinite_values_propagate():
    x = torch.tensor([1.0, float("nan"), 2.0])
    m = np.concatenate([[3], moments(x).double().numpy()])[None]
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
    assert probes._keys == [] or len(probes._keys) == len(rec.keys)
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
