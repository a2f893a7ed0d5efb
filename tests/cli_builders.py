"""Builders that misbehave on purpose, importable by the CLI in subprocess tests."""

from __future__ import annotations

import os
import time

import torch
from mup import MuReadout
from torch import nn

from coordcheck.setup.models import gpt, mlp


def flaky(width: int, **kwargs) -> nn.Module:
    """Fails at width 32, as a user's builder might (out of memory, a bug)."""
    if width == 32:
        raise RuntimeError("simulated: CUDA out of memory at width 32")
    return mlp(width, **kwargs)


def slow(width: int, **kwargs) -> nn.Module:
    """Hangs at width 64 while COORDCHECK_TEST_SLOW is set (to be killed mid-sweep): when a job builds it, not when
    the keywords are checked on the meta device before the sweep."""
    if width == 64 and os.environ.get("COORDCHECK_TEST_SLOW") and torch.empty(0).device.type != "meta":
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


def build_no_width(n_layer: int = 2, **kw) -> nn.Module:
    """Ignores the width it is given (the hidden size is hard-coded), as the user's builder in issue 20 did."""
    hidden = 32
    layers = [nn.Linear(16, hidden), nn.ReLU()]
    for _ in range(n_layer - 1):
        layers += [nn.Linear(hidden, hidden), nn.ReLU()]
    return nn.Sequential(*layers, MuReadout(hidden, 10))


def capped(width: int, **kwargs) -> nn.Module:
    """Widens up to 32, then stops (``min(width, 32)``: a cap left from debugging)."""
    return mlp(min(width, 32), **kwargs)


def deeper(width: int, **kwargs) -> nn.Module:
    """Reads ``width`` as a depth: more layers of a fixed size, no wider."""
    return mlp(16, depth=width // 8, **kwargs)


def gpt_no_width(n_layer: int = 1, **kw) -> nn.Module:
    """The built-in GPT at a hard-coded width 16, whatever width it is given (for the learning-rate sweep)."""
    return gpt(16, n_layer=n_layer, n_head=2)


def deep_flaky(width: int, n_layer: int = 2, **kwargs) -> nn.Module:
    """The built-in GPT, failing at depth 4 (a depth sweep's job that fails: out of memory, a bug)."""
    if n_layer == 4:
        raise RuntimeError("simulated: CUDA out of memory at depth 4")
    return gpt(width, n_layer=n_layer, **kwargs)

