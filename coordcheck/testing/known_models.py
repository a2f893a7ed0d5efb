"""Models whose muP answer is known, for the verdict's known-answer tests and ``experiments/known_answers.py``.

``HandMuP`` implements muP by hand (no mup package), the way nanoGPT-mup or OLMo-core do:
an output multiplier ``base_width / width`` on the logits and a hidden-matrix Adam learning
rate scaled by ``base_width / width``, through its own optimizer factory. The planted bugs
switch one of the two off.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Readout(nn.Module):
    """Linear readout with an output multiplier (muP: base_width / width)."""

    def __init__(self, width: int, out_dim: int, mult: float):
        super().__init__()
        self.fc = nn.Linear(width, out_dim)
        self.mult = mult
        nn.init.zeros_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.mult


class HandMuP(nn.Module):
    def __init__(self, width: int, in_dim: int = 32, out_dim: int = 10, depth: int = 3, base_width: int = 64,
                 output_multiplier: bool = True, scale_hidden_lr: bool = True):
        super().__init__()
        self.width, self.base_width, self.scale_hidden_lr = width, base_width, scale_hidden_lr
        self.input = nn.Linear(in_dim, width)
        self.hidden = nn.ModuleList(nn.Linear(width, width) for _ in range(depth - 1))
        self.readout = Readout(width, out_dim, base_width / width if output_multiplier else 1.0)
        for lin in [self.input, *self.hidden]:
            nn.init.normal_(lin.weight, std=(2.0 / lin.in_features) ** 0.5)  # var 2/fan_in
            nn.init.zeros_(lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.input(x))
        for lin in self.hidden:
            x = F.relu(lin(x))
        return self.readout(x)


def build(width: int, **kwargs) -> HandMuP:
    return HandMuP(width, **kwargs)


def build_no_multiplier(width: int, **kwargs) -> HandMuP:
    return HandMuP(width, output_multiplier=False, **kwargs)


def build_unscaled_hidden_lr(width: int, **kwargs) -> HandMuP:
    return HandMuP(width, scale_hidden_lr=False, **kwargs)


def make_optimizer(model: HandMuP, lr: float) -> torch.optim.Optimizer:
    """Adam with muP per-group learning rates: hidden matrices get lr * base_width / width."""
    hidden = [lin.weight for lin in model.hidden]
    ids = {id(p) for p in hidden}
    rest = [p for p in model.parameters() if id(p) not in ids]
    scale = model.base_width / model.width if model.scale_hidden_lr else 1.0
    return torch.optim.Adam([{"params": rest, "lr": lr}, {"params": hidden, "lr": lr * scale}], lr=lr)
