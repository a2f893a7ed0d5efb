"""Builders that misbehave on purpose, importable by the CLI in subprocess tests."""

from __future__ import annotations

import os
import time

from torch import nn

from coordcheck.models import mlp


def flaky(width: int, **kwargs) -> nn.Module:
    """Fails at width 32, as a user's builder might (out of memory, a bug)."""
    if width == 32:
        raise RuntimeError("simulated: CUDA out of memory at width 32")
    return mlp(width, **kwargs)


def slow(width: int, **kwargs) -> nn.Module:
    """Hangs at width 64 while COORDCHECK_TEST_SLOW is set (to be killed mid-sweep)."""
    if width == 64 and os.environ.get("COORDCHECK_TEST_SLOW"):
        time.sleep(120)
    return mlp(width, **kwargs)


def no_width(size: int) -> nn.Module:
    return nn.Linear(size, size)


def not_a_module(width: int) -> str:
    return "a model"


def no_readout(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(32, width), nn.ReLU(), nn.Linear(width, 10))


class _RaisesInForward(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc, self.head = nn.Linear(32, width), nn.Linear(width, 10)

    def forward(self, x):
        return self.head(self.fc(x).softmax(dim=-1, keepdims=True))  # an unexpected keyword argument


def raises_in_forward(width: int) -> nn.Module:
    return _RaisesInForward(width)
