"""``loss=model`` when the model returns its loss alone (nanochat's ``forward(idx, targets)``): the bare scalar is the
loss, the logits are measured where the loss was computed from them, and every entry point (API, CLI, cause pass,
gradient flow, transfer) gets a whole check."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from user_models import NanochatStyleGPT, nanochat_optimizer

from coordcheck import coord_check
from coordcheck.core.errors import CoordCheckError
from coordcheck.gradflow.probe import GradFlowProbe
from coordcheck.record.probes import LOGITS_MODULE, Probes
from coordcheck.run.train import cross_entropy, model_loss
from coordcheck.setup.data import tokens
from coordcheck.setup.parametrization import Standard
from coordcheck.transfer.frame import TransferIdentity
from coordcheck.transfer.train import run_cell

from conftest import run_cli

BY_HAND = dict(parametrization="none", optimizer=nanochat_optimizer, loss="model", forward_targets=True, steps=2,
               seeds=1, progress=False)


def test_a_bare_scalar_is_the_loss_and_cross_entropy_says_to_set_loss_model():
    assert model_loss(torch.tensor(2.5)).item() == 2.5
    assert model_loss(torch.tensor([1.5])).shape == ()  # one number kept in a (1,) tensor
    with pytest.raises(CoordCheckError, match="loss=model, but the model returned no scalar loss"):
        model_loss(torch.zeros(4, 10))  # the logits, when the model was called without its targets
    with pytest.raises(CoordCheckError, match="the model returned one number .* set loss=model"):
        cross_entropy(torch.tensor(2.5), torch.zeros(4, dtype=torch.long))


def test_a_model_returning_its_bare_loss_gets_a_whole_check():
    r = coord_check(NanochatStyleGPT, [32, 64, 128], **BY_HAND)
    assert r.passed, r.report()
    df = r.frame
    assert "(root)" not in set(df["module"])  # the loss is no activation
    logits = df[df["module"] == LOGITS_MODULE]  # lm_head(x) * base_width / width: the model's logits
    assert set(logits["role"]) == {"output"} and set(logits["tensor"]) == {"out", "delta"}
    assert set(df.loc[df["module"] == "lm_head", "role"]) == {"output"}
    loss = df[df["tensor"] == "loss"]
    assert len(loss) == 3 * 3 and loss.loc[loss["step"] == 0, "value"].between(5.0, 6.0).all()  # ~ln(256) = 5.5
    assert (loss.groupby("width")["value"].agg(lambda v: v.iloc[-1] < v.iloc[0])).all()  # it learns from it
    assert df["data"].iloc[0] == "tokens"  # read off the model's embedding, as for any model


def test_the_sp_control_fails_with_its_cause_measured():
    r = coord_check(NanochatStyleGPT, [32, 64, 128], **{**BY_HAND, "parametrization": "sp", "optimizer": "adam"})
    assert not r.passed
    assert {"weight", "update", "gain"} <= set(r.frame["tensor"])  # the facts every sweep measures
    assert "hidden matrices" in r.verdict.first_cause  # the learning rate named, as for any model under SP


class PlainHeadLoss(nn.Module):
    """The loss straight from the readout's output (a view of it): no ``(logits)`` row, the readout is the output."""

    def __init__(self, width: int = 32, vocab: int = 64):
        super().__init__()
        self.wte, self.lm_head = nn.Embedding(vocab, width), nn.Linear(width, vocab)

    def forward(self, idx, targets=None):
        logits = self.lm_head(torch.relu(self.wte(idx)))
        return logits if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class LogSoftmaxNll(PlainHeadLoss):
    """``nll_loss`` of a ``log_softmax`` of the scaled logits: the softmax's input is the logits."""

    def forward(self, idx, targets=None):
        logp = F.log_softmax(self.lm_head(torch.relu(self.wte(idx))) * 0.5, dim=-1)
        return F.nll_loss(logp.view(-1, logp.size(-1)), targets.view(-1))


@pytest.mark.parametrize("model, logits", [(PlainHeadLoss(), False), (LogSoftmaxNll(), True)])
def test_the_logits_of_a_bare_loss_are_recorded_once(model, logits):
    batch = tokens(vocab_size=64)
    with Probes(model) as probes:
        for step in (0, 1):
            probes.begin_step(step)
            loss = model(batch.inputs, batch.targets)
            record = probes.end_step(loss)
            names = {name for name, _ in record.keys}
            assert (LOGITS_MODULE in names) == logits and "(root)" not in names
            assert not any("softmax" in name for name in names)  # the log_softmax's input is the logits, not routing
    assert probes.layout["lm_head"][1] == "output"


def test_gradflow_in_a_loop_that_calls_model_x_y():
    torch.manual_seed(0)
    model = NanochatStyleGPT(32)
    batch = tokens()
    opt = nanochat_optimizer(model, 1e-3)
    with GradFlowProbe(model, opt) as probe:
        for step in range(2):
            loss = model(batch.inputs, batch.targets)
            loss.backward()
            probe.step(step, loss=loss)
            opt.step()
            opt.zero_grad()
    modules = set(probe.frame["module"])
    assert "lm_head" in modules and "(root)" not in modules


def test_transfer_trains_a_model_returning_its_bare_loss():
    def data(split, seed):
        while True:
            yield tokens(seed=seed)

    frame, facts = run_cell(NanochatStyleGPT, 32, 1e-3, seeds=[0], parametrization=Standard(),
                            optimizer=nanochat_optimizer, data=data, steps=3, eval_batches=1,
                            identity=TransferIdentity("c", "nc", "none", "f", "t"), base_width=32, progress=False,
                            loss_fn="model", forward_targets=True)
    assert (frame["status"] == "ok").all() and frame["loss"].notna().all() and facts["diverged"] == []
    train = frame[frame["split"] == "train"]["loss"].tolist()
    assert train[-1] < train[0]  # it learns from the loss it returns


@pytest.mark.slow
def test_the_cli_checks_a_model_returning_its_bare_loss(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli("model=custom", "model._target_=user_models.NanochatStyleGPT", "parametrization=none",
                "optimizer=factory", "optimizer._target_=user_models.nanochat_optimizer", "loss=model",
                "forward_targets=true", "width=32,64,128", "steps=2", "seeds=1", "base_width=32",
                f"hydra.sweep.dir={sweep}", "--multirun", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "coordcheck: PASS" in r.stdout
    assert (sweep / "report" / "report.md").is_file()
