"""Small models whose gradient-flow answer is known, for the gradient-flow tests.

``DeepMLP`` is a plain MLP (no residuals, no norms) with knobs that plant one bug each: an init
scale (std ``init_scale / sqrt(fan_in)``), a ``detach`` before ``blocks[detach_at]`` (broken graph), a
``dead`` ReLU layer (bias -1e3: every output exactly zero), activation checkpointing, and a
forward run entirely under ``torch.no_grad``. Layout: ``input`` (layer 0), ``blocks.i``
(layer i + 1), ``readout`` (layer L + 1), as the coord check numbers them.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

Activation = Literal["tanh", "sigmoid", "relu", "linear"]
ACTIVATIONS = {"tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "relu": nn.ReLU, "linear": nn.Identity}


class Layer(nn.Module):
    def __init__(self, fan_in: int, width: int, activation: Activation):
        super().__init__()
        self.fc = nn.Linear(fan_in, width)
        self.act = ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


class DeepMLP(nn.Module):
    """Vectors (B, in_dim) -> logits (B, out_dim) through ``depth`` hidden layers (input included)."""

    def __init__(self, width: int, *, depth: int = 4, in_dim: int = 16, out_dim: int = 10,
                 activation: Activation = "relu", init_scale: float | None = None, detach_at: int | None = None,
                 dead: int | None = None, checkpointed: bool = False, no_grad: bool = False):
        super().__init__()
        self.input = Layer(in_dim, width, activation)
        self.blocks = nn.ModuleList(Layer(width, width, activation) for _ in range(depth - 1))
        self.readout = nn.Linear(width, out_dim)
        self.detach_at, self.checkpointed, self.no_grad = detach_at, checkpointed, no_grad
        if init_scale is not None:
            with torch.no_grad():
                for layer in [self.input, *self.blocks]:
                    nn.init.normal_(layer.fc.weight, std=init_scale / layer.fc.in_features**0.5)
                    nn.init.zeros_(layer.fc.bias)
        if dead is not None:
            with torch.no_grad():
                self.blocks[dead].fc.bias.fill_(-1e3)  # every pre-activation far below 0: ReLU outputs 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.no_grad):
            x = self.input(x)
            for i, block in enumerate(self.blocks):
                if self.detach_at == i:
                    x = x.detach()  # the planted bug: every layer before blocks[i] gets no gradient
                x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
            return self.readout(x)


def build(width: int, **kwargs) -> DeepMLP:
    return DeepMLP(width, **kwargs)


def detached_mlp(width: int, in_dim: int = 16, out_dim: int = 10, depth: int = 4, **_: object) -> DeepMLP:
    """A builder for the CLI (accepts the mlp config's keys): the graph is cut after block 0."""
    return DeepMLP(width, depth=depth, in_dim=in_dim, out_dim=out_dim, detach_at=1)
