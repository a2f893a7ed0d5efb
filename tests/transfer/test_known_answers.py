"""Known answers for the μTransfer verdict on real training (small widths, few steps; full size in
``experiments/transfer.py``): the built-in GPT at the default grid's widths transfers under muP and not
under SP; a hand-written nanoGPT-style muP model with its hidden learning rate scaled twice moves its
optimum the other way (up); a grid that stops short of the optimum is inconclusive and says which way
to extend it. About 4 minutes on 2 cores: one seed needs the default grid's widths and steps to decide."""

from __future__ import annotations

import pytest
import torch

import coordcheck
from coordcheck import models
from coordcheck.testing.public_models import configure_optimizers, gpt_builder
from coordcheck.transfer.report import build_transfer_report

pytestmark = pytest.mark.slow


def octaves(lo: int, hi: int) -> list[float]:
    return [2.0 ** k for k in range(lo, hi + 1)]


@pytest.fixture(autouse=True)
def _two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def builtin_default_widths():
    """The default grid's widths and steps (smaller ones are honestly inconclusive with one seed: their
    optima intervals span octaves); each parametrization's learning rates trimmed to what its fit uses."""
    import pandas as pd

    torch.set_num_threads(2)
    common = dict(widths=[128, 256, 512], steps=150, base_width=128, progress=False)
    mup = coordcheck.transfer(models.gpt, lrs=octaves(-10, -6), parametrization="mup", **common)
    sp = coordcheck.transfer(models.gpt, lrs=octaves(-12, -5), parametrization="sp", **common)
    return build_transfer_report(pd.concat([mup.frame, sp.frame]))


def test_builtin_gpt_transfers_under_mup_and_not_under_sp(builtin_default_widths):
    r = builtin_default_widths
    shifts = r.shifts.set_index("parametrization")
    assert r.verdict.status == "transfers", r.markdown()
    assert shifts.loc["mup", "status"] == "transfers" and abs(shifts.loc["mup", "shift"]) < 0.25
    assert shifts.loc["sp", "status"] == "does not transfer"
    assert -1.5 < shifts.loc["sp", "shift"] < -0.75  # near width^-1: Adam's lr not scaled with width
    assert "not scaled with width" in shifts.loc["sp", "reason"]


def test_hidden_lr_scaled_twice_moves_the_optimum_the_other_way():
    r = coordcheck.transfer(gpt_builder, widths=[64, 128, 256], lrs=octaves(-11, -3), parametrization="none",
                            optimizer=configure_optimizers, forward_targets=True, loss="model", steps=150,
                            base_width=64, progress=False, lr_scaled_twice=True)
    s = r.shifts.iloc[0]
    # measured: +0.52 [+0.16, +0.88] (the embeddings and readout keep an unscaled lr, so less than +1)
    assert s["ci_low"] > 0, r.report()  # up, significantly: the opposite of SP's drift
    assert r.verdict.status != "transfers"


def test_grid_short_of_the_optimum_says_extend_it_upwards():
    r = coordcheck.transfer(models.gpt, widths=[32, 64], lrs=octaves(-11, -8), steps=40, base_width=32,
                            progress=False)
    assert r.verdict.status == "inconclusive"
    assert "extend the grid to larger learning rates" in r.verdict.reason
    assert set(r.optima["edge"]) == {"high"}
