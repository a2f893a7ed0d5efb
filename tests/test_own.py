"""The module's own update (``own``) and its input (``in``), measured by the probes: hand computations on tiny
models with known weights, the gain's insensitivity to an inflated input under Adam, training left unchanged, a
module that rejects its sampled rows, and mup's MuReadout."""

import copy
import logging

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from mup import MuAdam, MuReadout, set_base_shapes
from pandas.testing import assert_frame_equal
from torch import nn

from coordcheck import coord_check
from coordcheck.setup.data import Batch
from coordcheck.core.frame import CAUSE_TENSORS
from coordcheck.setup.models import gpt
from coordcheck.record.moments import N
from coordcheck.record.own import SAMPLED_ROWS, sample_rows, sampled_rows
from coordcheck.record.probes import Probes, StepRecord, stats_from_moments
from coordcheck.run.train import train_with_probes

ALL = ("out", "delta", "in", "own")


def _stat(rec: StepRecord, module: str, tensor: str, stat: str = "std") -> float:
    i = rec.keys.index((module, tensor))
    return float(stats_from_moments(rec.moments[i : i + 1], [stat])[0, 0])


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x.square().mean().sqrt()


class Tiny(nn.Module):
    """tokens (B,) -> Embedding -> LayerNorm -> Linear (with bias) -> logits (B, k)."""

    def __init__(self, vocab: int = 11, d: int = 6, k: int = 5):
        super().__init__()
        self.emb, self.ln, self.fc = nn.Embedding(vocab, d), nn.LayerNorm(d), nn.Linear(d, k)
        with torch.no_grad():  # known weights, not all at their defaults
            self.emb.weight.copy_(torch.linspace(-2, 2, vocab * d).reshape(vocab, d).sin())
            self.ln.weight.copy_(torch.linspace(0.5, 1.5, d))
            self.ln.bias.copy_(torch.linspace(-0.1, 0.1, d))
            self.fc.weight.copy_(torch.linspace(-1, 1, k * d).reshape(k, d).cos() / d**0.5)
            self.fc.bias.fill_(0.3)

    def forward(self, idx):
        return self.fc(self.ln(self.emb(idx)))


def _tiny_batch(n: int = 8) -> Batch:
    g = torch.Generator().manual_seed(1)
    return Batch(torch.randint(0, 11, (n,), generator=g), torch.randint(0, 5, (n,), generator=g))


def test_sampled_rows_are_a_bounded_share_of_the_leading_dimension():
    assert [sampled_rows(n) for n in (1, 3, 4, 8, 16, 64, 1000)] == [1, 1, 1, 2, 4, SAMPLED_ROWS, SAMPLED_ROWS]


@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_own_and_in_equal_a_hand_computation(opt):
    torch.manual_seed(0)
    model, batch = Tiny(), _tiny_batch()
    theta0 = copy.deepcopy(model)
    optimizer = (torch.optim.Adam(model.parameters(), lr=0.05) if opt == "adam"
                 else torch.optim.SGD(model.parameters(), lr=0.5))
    records, layout = train_with_probes(model, optimizer, batch, steps=1, tensors=ALL)  # model is now θ_1
    idx = batch.inputs[: sampled_rows(len(batch.inputs))]  # 2 of 8 rows
    with torch.no_grad():
        e0, e1 = theta0.emb(idx), model.emb(idx)  # the LayerNorm's input at steps 0 and 1
        z0, z1 = theta0.ln(e0), model.ln(e1)  # the Linear's input
        want = {  # (module, step) -> own: norm and embedding unscaled (s = 1), the Linear divided by rms(input)
            ("emb", 0): e0, ("emb", 1): e1 - e0,
            ("ln", 0): z0, ("ln", 1): model.ln(e1) - theta0.ln(e1),
            ("fc", 0): theta0.fc(z0) / _rms(z0), ("fc", 1): (model.fc(z1) - theta0.fc(z1)) / _rms(z1),
        }
        inputs = {("ln", 0): e0, ("ln", 1): e1, ("fc", 0): z0, ("fc", 1): z1}
    assert all(w.abs().max() > 1e-4 for w in want.values())  # every parameter moved: a real comparison
    for (module, step), w in want.items():
        rec = records[step]
        assert _stat(rec, module, "own", "std") == pytest.approx(w.std().item(), rel=1e-5, abs=1e-7), (module, step)
        assert _stat(rec, module, "own", "mean") == pytest.approx(w.mean().item(), rel=1e-5, abs=1e-7), (module, step)
    for (module, step), x in inputs.items():
        assert _stat(records[step], module, "in", "rms") == pytest.approx(_rms(x).item(), rel=1e-6)
    assert ("emb", "in") not in records[0].keys  # an integer input has no statistics
    assert layout["fc"][1] == "output" and layout["ln"][1] == "norm"


class Inflated(nn.Module):
    """x -> fc1 (frozen) -> times ``mult`` (an upstream multiplier outside any module) -> fc2; loss linear in the
    output, so fc2's input is exactly ``mult`` times larger at every step."""

    def __init__(self, mult: float):
        super().__init__()
        self.mult = mult
        self.fc1, self.fc2 = nn.Linear(4, 16, bias=False), nn.Linear(16, 3, bias=False)
        self.fc1.requires_grad_(False)

    def forward(self, x):
        return self.fc2(self.mult * self.fc1(x))


def _fc2_own(mult: float, opt: str) -> list[float]:
    torch.manual_seed(0)
    model = Inflated(mult)
    g = torch.Generator().manual_seed(2)
    batch = Batch(torch.randn(16, 4, generator=g), torch.randn(3, generator=g))
    optimizer = (torch.optim.Adam(model.fc2.parameters(), lr=0.01, eps=1e-12) if opt == "adam"
                 else torch.optim.SGD(model.fc2.parameters(), lr=0.01))
    records, _ = train_with_probes(model, optimizer, batch, steps=2, tensors=ALL,
                                   loss_fn=lambda out, c: (out * c).sum())  # fc2's gradient pattern: c x^T
    return [_stat(r, "fc2", "own") for r in records]


def test_an_inflated_input_leaves_adams_gain_unchanged_and_inflates_sgds():
    adam1, adam10 = _fc2_own(1.0, "adam"), _fc2_own(10.0, "adam")
    assert adam1[1] > 0 and adam10 == pytest.approx(adam1, rel=1e-4)  # ΔW does not scale with x under Adam
    sgd1, sgd10 = _fc2_own(1.0, "sgd"), _fc2_own(10.0, "sgd")
    assert sgd10[0] == pytest.approx(sgd1[0], rel=1e-5)  # the init gain: scale-free
    assert sgd10[1] / sgd1[1] == pytest.approx(10.0, rel=1e-5)  # ΔW = -lr c x^T carries the input's scale


class Stochastic(nn.Module):
    """A module with its own parameter whose forward uses the RNG (dropout) and a BatchNorm (running statistics)."""

    def __init__(self, d: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d, d) / d**0.5)
        self.bn = nn.BatchNorm1d(d)

    def forward(self, x):
        return torch.tanh(self.bn(F.dropout(x @ self.w, 0.3, self.training)))  # its own output, not bn's


class Noisy(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.inp, self.mid, self.out = nn.Linear(5, d), Stochastic(d), nn.Linear(d, 3)

    def forward(self, x):
        return self.out(torch.relu(self.mid(self.inp(x))))


def _noisy_run(tensors):
    torch.manual_seed(0)
    model = Noisy()
    g = torch.Generator().manual_seed(3)
    batch = Batch(torch.randn(16, 5, generator=g), torch.randint(0, 3, (16,), generator=g))
    records, _ = train_with_probes(model, torch.optim.Adam(model.parameters(), lr=0.01), batch, steps=3,
                                   tensors=tensors)
    return records, model, torch.get_rng_state()


def test_training_is_bit_identical_with_own_on():
    (off, m_off, rng_off), (on, m_on, rng_on) = _noisy_run(("out", "delta")), _noisy_run(ALL)
    for a, b in zip(off, on):
        assert a.loss == b.loss
        keep = [i for i, k in enumerate(b.keys) if k[1] in ("out", "delta")]
        assert a.keys == [b.keys[i] for i in keep]
        assert (a.moments == b.moments[keep]).all()
    for (n, p), q in zip(m_off.state_dict().items(), m_on.state_dict().values()):
        assert torch.equal(p, q), n  # parameters and BatchNorm running statistics alike
    assert torch.equal(rng_off, rng_on)  # no random number drawn by the extra calls
    assert ("mid", "own") in on[1].keys and ("mid.bn", "own") in on[1].keys  # the generic path did run
    assert all(m.training for m in m_on.modules())  # eval mode only for the extra calls


def test_a_gpt_frame_is_bit_identical_in_out_delta_and_loss():
    kw = dict(seeds=1, steps=2, progress=False, n_layer=1, parametrization="mup")
    r_off = coord_check(gpt, [32, 64], tensors=("out", "delta"), **kw)
    r_on = coord_check(gpt, [32, 64], tensors=CAUSE_TENSORS, **kw)
    off, on = r_off.frame, r_on.frame
    assert set(on["tensor"]) == {*CAUSE_TENSORS, "loss", "weight", "update", "gain"}
    assert (r_on.verdict.status, r_on.verdict.reason) == (r_off.verdict.status, r_off.verdict.reason)  # not judged
    on = on[on["tensor"].isin(["out", "delta", "loss"])].reset_index(drop=True)
    off = off[off["tensor"].isin(["out", "delta", "loss"])].reset_index(drop=True)
    assert_frame_equal(off.drop(columns=["config_id", "family_id"]), on.drop(columns=["config_id", "family_id"]))


def test_batched_reductions_are_unchanged_by_own():
    torch.manual_seed(0)
    model, batch = Tiny(), _tiny_batch()
    recs = []
    for tensors in (("out", "delta"), ALL):
        probes = Probes(model, tensors=tensors, batched=True)
        probes.begin_step(0)
        recs.append(probes.end_step(model(batch.inputs).mean()))
        probes.remove()
    keep = [i for i, k in enumerate(recs[1].keys) if k[1] in ("out", "delta")]
    assert recs[0].keys == [recs[1].keys[i] for i in keep] and (recs[0].moments == recs[1].moments[keep]).all()


class Fussy(nn.Module):
    """Owns a parameter and accepts only a batch of exactly 8 rows."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return x.view(8, 4) * self.w


def test_a_module_that_rejects_its_sampled_rows_records_nothing_and_warns(caplog):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), Fussy(), nn.Linear(4, 2))
    batch = Batch(torch.randn(8, 3), torch.randint(0, 2, (8,)))
    with caplog.at_level(logging.WARNING, logger="coordcheck.record.own"):
        records, _ = train_with_probes(model, torch.optim.Adam(model.parameters()), batch, steps=2, tensors=ALL)
    warned = [r for r in caplog.records if r.name == "coordcheck.record.own"]
    assert len(warned) == 1 and "1 (Fussy) rejected its sampled input" in warned[0].getMessage()
    for rec in records:
        assert not {("1", "in"), ("1", "own")} & set(rec.keys) and ("1", "out") in rec.keys
        assert {("0", "own"), ("2", "in"), ("2", "own")} <= set(rec.keys)


class MuNet(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc = nn.Linear(4, width)
        self.readout = MuReadout(width, 3, readout_zero_init=False, output_mult=2.0)

    def forward(self, x):
        return self.readout(torch.tanh(self.fc(x)))


def test_mureadout_gets_its_width_multiplier_in_the_extra_calls():
    torch.manual_seed(0)
    model = MuNet(64)
    set_base_shapes(model, MuNet(16))  # width_mult 4
    theta0 = copy.deepcopy(model)
    set_base_shapes(theta0, MuNet(16), rescale_params=False)  # deepcopy drops infshape
    g = torch.Generator().manual_seed(4)
    batch = Batch(torch.randn(32, 4, generator=g), torch.randint(0, 3, (32,), generator=g))
    records, layout = train_with_probes(model, MuAdam(model.parameters(), lr=0.01), batch, steps=1, tensors=ALL)
    assert model.readout.width_mult() == 4
    with torch.no_grad():
        x = batch.inputs[: sampled_rows(32)]
        h0, h1 = torch.tanh(theta0.fc(x)), torch.tanh(model.fc(x))
        want = [theta0.readout(h0) / _rms(h0), (model.readout(h1) - theta0.readout(h1)) / _rms(h1)]
    assert layout["readout"][1] == "output"
    for rec, w in zip(records, want):
        assert _stat(rec, "readout", "own") == pytest.approx(w.std().item(), rel=1e-5)
    assert isinstance(model.readout.weight, nn.Parameter) and hasattr(model.readout.weight, "infshape")


def test_sequence_first_models_and_the_default_gpt_record_in_and_own():
    from coordcheck.testing.public_models import encoder_builder, seq_first_tokens

    res = coord_check(encoder_builder, [32], seeds=1, steps=1, progress=False,
                      data=seq_first_tokens(), tensors=CAUSE_TENSORS)
    own = res.frame[(res.frame["tensor"] == "own") & (res.frame["stat"] == "std")]
    assert len(own) and own["value"].notna().all()
    gpt_frame = coord_check(gpt, [32], seeds=1, steps=1, progress=False, n_layer=1, tensors=CAUSE_TENSORS).frame
    owners = set(gpt_frame[gpt_frame["tensor"] == "own"]["module"])
    assert {"wte", "wpe", "lm_head", "ln_f", "blocks.0.mlp.c_fc", "blocks.0.attn.c_q"} <= owners
    assert set(gpt_frame[gpt_frame["tensor"] == "in"]["module"]) == owners - {"wte", "wpe"}
    assert pd.api.types.is_float_dtype(gpt_frame["value"])


def test_in_alone_or_own_alone_records_only_what_was_asked():
    torch.manual_seed(0)
    model, batch = Tiny(), _tiny_batch()
    for tensors in (("out", "in"), ("out", "own")):
        m = copy.deepcopy(model)
        records, _ = train_with_probes(m, torch.optim.Adam(m.parameters()), batch, steps=1, tensors=tensors)
        kinds = {t for rec in records for _, t in rec.keys}
        assert kinds == set(tensors), tensors


def test_the_sampled_rows_cut_every_argument_with_the_first_ones_leading_size():
    x, mask, other, bias = torch.zeros(16, 2, 4), torch.zeros(16, 16), torch.zeros(3, 16), torch.zeros(16)
    args, kwargs = sample_rows((x, mask, other, 7), {"bias": bias, "flag": True})
    assert [tuple(a.shape) for a in args[:3]] == [(4, 2, 4), (4, 16), (3, 16)] and args[3] == 7
    assert kwargs["bias"].shape == (4,) and kwargs["flag"] is True
    assert sample_rows((3, "a"), {}) is None


def test_sequence_first_inputs_are_sampled_in_time():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    T, B = 16, 5
    batch = Batch(torch.randn(T, B, 4), torch.randint(0, 3, (T, B)))
    records, _ = train_with_probes(model, torch.optim.Adam(model.parameters()), batch, steps=1, tensors=ALL)
    rec = records[1]
    counts = {k: rec.moments[i, N] for i, k in enumerate(rec.keys)}
    assert counts[("2", "own")] == sampled_rows(T) * B * 3 and counts[("2", "in")] == sampled_rows(T) * B * 6
    assert counts[("2", "out")] == T * B * 3



def _own_records(steps: int = 3):
    torch.manual_seed(0)
    model, batch = Tiny(), _tiny_batch()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    probes = Probes(model, tensors=ALL)
    records, ptrs = [], set()
    for step in range(steps + 1):
        probes.begin_step(step)
        loss = F.cross_entropy(model(batch.inputs), batch.targets)
        records.append(probes.end_step(loss))
        ptrs |= {buf.data_ptr() for buf in probes._own._delta.values()}
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return probes, records, ptrs


def test_the_parameter_change_is_written_into_one_reused_buffer(monkeypatch):
    probes, records, ptrs = _own_records()
    own = probes._own
    assert len(ptrs) == 1  # one buffer (float32, CPU), made once, reused by every module and step
    largest = max(sum(v.numel() for v in ps.values()) for ps in own._theta0.values())
    assert next(iter(own._delta.values())).numel() == largest
    weight, bias = own._delta_views["fc", "weight"], own._delta_views["fc", "bias"]  # side by side, not overlapping
    assert weight.data_ptr() + weight.numel() * weight.element_size() == bias.data_ptr()
    probes.remove()
    assert not own._delta and not own._delta_views
    # the same numbers as a fresh tensor per parameter and step (the code before the buffer)
    from coordcheck.record.own import OwnUpdate

    monkeypatch.setattr(OwnUpdate, "_delta_view", lambda self, name, key, like: torch.empty_like(like))
    _, fresh, _ = _own_records()
    assert [r.keys for r in fresh] == [r.keys for r in records]
    assert all((r.moments == f.moments).all() for r, f in zip(records, fresh))
    assert any(k[1] == "own" for k in records[-1].keys)
