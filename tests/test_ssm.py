"""Issue 29: state-space layers judged honestly — what has an established muP rule (the in and out projections) is
judged; the selective scan's own parameters (A_log, D, dt_bias) and its output are measured and said to be not
judged, never given a cause with a fix."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from mup import MuReadout
from torch import nn

from coordcheck import coord_check

HEAD = 8  # the scan's head size: the number of heads grows with width, as Mamba-2's does


class SelectiveScan(nn.Module):
    """A diagonal selective scan per head, as Mamba-2 writes it: h_t = exp(-exp(A_log) dt_t) h_{t-1} + dt_t x_t,
    y_t = h_t + D x_t, with dt_t = softplus(dt_t' + dt_bias)."""

    def __init__(self, heads: int):
        super().__init__()
        self.A_log = nn.Parameter(torch.log(torch.arange(1, heads + 1, dtype=torch.float32)))
        self.D = nn.Parameter(torch.ones(heads))
        self.dt_bias = nn.Parameter(torch.full((heads,), -2.0))

    def forward(self, x: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:  # x (B, T, H, P), dt (B, T, H)
        dt = F.softplus(dt + self.dt_bias)
        decay = torch.exp(-torch.exp(self.A_log) * dt)  # (B, T, H)
        h, ys = torch.zeros_like(x[:, 0]), []
        for t in range(x.shape[1]):
            h = decay[:, t, :, None] * h + dt[:, t, :, None] * x[:, t]
            ys.append(h + self.D[:, None] * x[:, t])
        return torch.stack(ys, dim=1)


class Mixer(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.heads = width // HEAD
        self.in_proj = nn.Linear(width, width + self.heads, bias=False)
        self.scan = SelectiveScan(self.heads)
        self.out_proj = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        u, dt = self.in_proj(x).split([C, self.heads], dim=-1)
        y = self.scan(u.view(B, T, self.heads, HEAD), dt)
        return self.out_proj(y.reshape(B, T, C))


class TinySSM(nn.Module):
    def __init__(self, width: int, vocab: int = 64):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(2))
        self.mixers = nn.ModuleList(Mixer(width) for _ in range(2))
        self.head = MuReadout(width, vocab, readout_zero_init=True)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for norm, mixer in zip(self.norms, self.mixers):
            x = x + mixer(norm(x))
        return self.head(x)


@pytest.mark.slow
def test_the_scan_is_measured_and_not_judged_the_projections_are():
    r = coord_check(TinySSM, [64, 128, 256], steps=4, seeds=2, progress=False,
                    tensors=["out", "delta", "in", "own"])
    v = r.verdict
    roles = v.roles.set_index("module")
    assert roles.loc["mixers.0.scan", "role"] == "scan"
    assert roles.loc["mixers.0.in_proj", "role"] == "hidden" and roles.loc["mixers.0.out_proj", "role"] == "hidden"
    scan = v.series[v.series["module"] == "mixers.0.scan"]
    assert set(scan["rule"]) <= {"scan-not-judged", "input-evidence"} and set(scan["status"]) == {"skip"}
    judged = v.series[(v.series["module"] == "mixers.0.out_proj") & (v.series["tensor"] == "out")]
    assert set(judged["rule"]) & {"hidden-updates-flat", "init-flat"}  # the projections keep muP's rules
    audit = r.audit.set_index("parameter") if "parameter" in r.audit.columns else r.audit
    for name in ("mixers.0.scan.A_log", "mixers.0.scan.D", "mixers.0.scan.dt_bias"):
        assert audit.loc[name, "status"] == "not judged" and audit.loc[name, "class"] == "vector"
    note = next(n for n in v.notes if n.startswith("not judged: no established muP rule for mixers.0.scan."))
    assert "A_log (init ∝ width^" in note and "Vankadara" in note
    assert not any("scan" in m for ms in v.causes.get("modules", []) for m in ms)  # never a cause


@pytest.mark.slow
def test_falcon_h1_made_mup_passes_with_its_scan_noted_not_judged(monkeypatch, capsys, tmp_path):
    pytest.importorskip("transformers")
    import json

    from conftest import run_in_process

    code = run_in_process(monkeypatch, "+experiment=falcon_h1_mup", "width=64,128,256", "seeds=2", "steps=4",
                          "threads=1", "progress=false", "report.figures=false", f"hydra.sweep.dir={tmp_path}",
                          "--multirun")
    capsys.readouterr()
    assert code == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["status"] == "pass", report["reason"]
    note = next(n for n in report["verdict_notes"] if "no established muP rule" in n)
    assert "model.layers.0.mamba.A_log" in note and "model.layers.0.mamba.dt_bias" in note


def _mamba2(width: int, **kwargs):
    pytest.importorskip("transformers")
    from coordcheck.setup.hf import hf_config

    return hf_config(width, "mamba2", config_kwargs={"head_dim": 16, **kwargs})


def test_mamba2s_heads_grow_with_the_width_its_head_size_fixed():
    small, wide = _mamba2(64), _mamba2(128)
    assert (small.num_heads, wide.num_heads) == (8, 16) and small.head_dim == wide.head_dim == 16
    for c in (small, wide):
        assert c.hidden_size * c.expand == c.num_heads * c.head_dim
        assert not hasattr(c, "num_attention_heads")  # no attention: the width sets no attention heads
    assert _mamba2(64, expand=1, n_groups=4).num_heads == 4


def test_mamba2s_heads_given_are_kept_and_checked_in_one_line():
    from coordcheck.core.errors import CoordCheckError

    assert _mamba2(64, num_heads=8, n_groups=4).num_heads == 8
    with pytest.raises(CoordCheckError) as e:  # kept, not rewritten by the width: it no longer fits at 128
        _mamba2(128, num_heads=8, n_groups=4)
    assert "num_heads * head_dim = 8 * 16" in str(e.value) and "\n" not in str(e.value)


def test_a_width_mamba2s_head_size_does_not_divide_is_one_line():
    from coordcheck.core.errors import CoordCheckError

    with pytest.raises(CoordCheckError) as e:
        _mamba2(80, head_dim=48)  # expand * width = 160
    msg = str(e.value)
    assert msg.startswith("width=80:") and "multiple of head_dim=48: choose widths it divides" in msg
    assert "\n" not in msg
    with pytest.raises(CoordCheckError) as e:
        _mamba2(64, head_dim=64)  # 2 heads, n_groups 8 by default
    assert "n_groups=8 does not divide the Mamba heads num_heads=2" in str(e.value) and "\n" not in str(e.value)
