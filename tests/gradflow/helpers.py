"""Shared helpers of the gradient-flow tests: a batch, the diagnoses by code, one statistic, a user's loop."""

from __future__ import annotations

import mup
import pandas as pd
from torch import nn

from coordcheck.setup.data import gaussian
from coordcheck.gradflow import Diagnosis, diagnose
from coordcheck.setup.parametrization import Mup, build_model

BATCH = gaussian(batch_size=64, dim=16, n_classes=10)


def found(frame: pd.DataFrame, **kwargs) -> dict[str, Diagnosis]:
    return {d.code: d for d in diagnose(frame, **kwargs)}


def stat(frame: pd.DataFrame, name: str, stat: str, step: int | None = None) -> float:
    rows = frame[(frame["name"] == name) & (frame["stat"] == stat)]
    rows = rows if step is None else rows[rows["step"] == step]
    assert len(rows) == 1, (name, stat, step)
    return float(rows["value"].iloc[0])


def loop(model, optimizer, probe, steps, *, zero=True, set_to_none=True, before_step=None):
    """The user's loop: zero_grad (or not), forward, backward, probe.step, optimizer.step."""
    for t in range(steps):
        if zero:
            optimizer.zero_grad(set_to_none=set_to_none)
        loss = nn.functional.cross_entropy(model(BATCH.inputs), BATCH.targets)
        loss.backward()
        if before_step is not None:
            before_step(model)
        probe.step(t, loss=loss)
        optimizer.step()


def mup_model(build, width, base_width=32, seed=0):
    parametrization = Mup()
    parametrization.prepare(build, base_width)
    model = build_model(build, width, seed, parametrization)
    return model, mup.MuAdam(model.parameters(), lr=0.01)
