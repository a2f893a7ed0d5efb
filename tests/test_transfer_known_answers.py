"""Known answers for the μTransfer verdict on real training (small widths, few steps; full size in
``experiments/transfer.py``): the built-in GPT transfers under muP and not under SP; a hand-written
nanoGPT-style muP model transfers, and with its hidden learning rate scaled twice its optimum moves
the other way; a grid that stops short of the optimum is inconclusive and says which way to extend it."""

from __future__ import annotations

import pytest
import torch

import coordcheck
from coordcheck import models
from coordcheck.testing.public_models import configure_optimizers, gpt_builder

pytestmark = pytest.mark.slow


def octaves(lo: int, hi: int) -> list[float]:
    return [2.0 ** k for k in range(lo, hi + 1)]


@pytest.fixture(autouse=True)
def _two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_builtin_gpt_transfers_under_mup_and_not_under_sp():
    r = coordcheck.transfer(models.gpt, widths=[32, 64, 128], lrs=octaves(-11, -4), parametrization=["mup", "sp"],
                            steps=40, base_width=32, progress=False)
    shifts = r.shifts.set_index("parametrization")
    assert r.verdict.status == "transfers", r.report()
    assert shifts.loc["mup", "status"] == "transfers" and abs(shifts.loc["mup", "shift"]) < 0.3
    assert shifts.loc["sp", "status"] == "does not transfer"
    assert -1.3 < shifts.loc["sp", "shift"] < -0.6  # near width^-1: Adam's lr not scaled with width
    assert "not scaled with width" in shifts.loc["sp", "reason"]


def handwritten(twice: bool):
    return coordcheck.transfer(gpt_builder, widths=[64, 128, 256], lrs=octaves(-11, -3), parametrization="none",
                               optimizer=configure_optimizers, forward_targets=True, loss="model", steps=80,
                               base_width=64, progress=False, lr_scaled_twice=twice)


def test_handwritten_mup_transfers():
    r = handwritten(twice=False)
    assert r.verdict.status == "transfers", r.report()


def test_hidden_lr_scaled_twice_moves_the_optimum_up():
    r = handwritten(twice=True)
    s = r.shifts.iloc[0]
    assert r.verdict.status == "does not transfer", r.report()
    assert s["shift"] > 0.5 and "scaled with width twice" in s["reason"]


def test_grid_short_of_the_optimum_says_extend_it_upwards():
    r = coordcheck.transfer(models.gpt, widths=[32, 64], lrs=octaves(-11, -8), steps=40, base_width=32,
                            progress=False)
    assert r.verdict.status == "inconclusive"
    assert "extend the grid to larger learning rates" in r.verdict.reason
    assert set(r.optima["edge"]) == {"high"}
