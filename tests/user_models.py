"""Models as users write them (importable by the CLI in tests, and copied as a user's ``my_pkg`` by pytester tests).

``TokenLM``: a small residual LM made muP with the mup package (a ``MuReadout``). ``PlainMLP``: an MLP as people
write it before they make it muP — its readout ``head`` is a plain ``nn.Linear``.
"""

from __future__ import annotations

import torch
from mup import MuReadout
from torch import nn


class TokenLM(nn.Module):
    def __init__(self, width: int, vocab_size: int = 128, n_layer: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.pos = nn.Embedding(16, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.GELU(),
                                                  nn.Linear(2 * width, width)) for _ in range(n_layer))
        self.norm = nn.LayerNorm(width)
        self.head = MuReadout(width, vocab_size)

    def forward(self, idx):
        x = self.embed(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = x + block(x)
        return self.head(self.norm(x))


class PlainMLP(nn.Module):
    def __init__(self, width: int, in_dim: int = 32, n_classes: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, width)
        self.fc2 = nn.Linear(width, width)
        self.head = nn.Linear(width, n_classes)

    def forward(self, x):
        return self.head(self.fc2(self.fc1(x).relu()).relu())
