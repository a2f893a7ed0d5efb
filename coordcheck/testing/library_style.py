"""A model written as libraries without muP write theirs, for ``optimizer=mup_groups`` and ``init=mup``.

Plain torch, no ``mup``: every weight drawn from one normal std (``init_std``, as Granite's or GPT-2's
``initializer_range``), layer norms, and muP's one forward knob the optimizer cannot supply — the logits divided
by ``width / base_width``, as Granite's ``logits_scaling``. Its hidden matrices still need their std to shrink
like fan_in^-1/2 (``init=mup``) and their Adam learning rate like 1/width (``optimizer=mup_groups``)::

    python -m coordcheck --multirun model=custom model._target_=coordcheck.testing.library_style.build data=tokens \\
        parametrization=none optimizer=mup_groups init=mup width=128,256,512

Tokens (B, T) -> logits (B, T, vocab_size); a residual MLP per block (no attention: the tokens do not mix).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LibraryLM", "build"]


class LibraryLM(nn.Module):
    def __init__(self, width: int, base_width: int = 128, vocab_size: int = 256, n_layer: int = 2, mlp_ratio: int = 4,
                 init_std: float = 0.02, logits_scaling: float | None = None):
        super().__init__()
        self.logits_scaling = width / base_width if logits_scaling is None else logits_scaling
        self.wte = nn.Embedding(vocab_size, width)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "ln": nn.LayerNorm(width),
            "up": nn.Linear(width, mlp_ratio * width, bias=False),
            "down": nn.Linear(mlp_ratio * width, width, bias=False),
        }) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab_size, bias=False)
        for module in self.modules():  # one std for every weight, as transformers' _init_weights
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=init_std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx)  # (B, T, width)
        for block in self.blocks:
            x = x + block["down"](F.gelu(block["up"](block["ln"](x))))
        return self.lm_head(self.ln_f(x)) / self.logits_scaling  # (B, T, vocab_size)


def build(width: int, base_width: int = 128, **kwargs) -> LibraryLM:
    """:class:`LibraryLM` at ``width``; the harness passes ``base_width`` (this signature names it)."""
    return LibraryLM(width, base_width, **kwargs)
