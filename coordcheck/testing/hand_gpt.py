"""A plain PyTorch GPT made muP by hand, the way our docs teach: a user's own model, no mup package.

Token and position embeddings (``nn.Embedding``), pre-LN blocks of ``nn.Linear`` layers with biases, attention by
``F.scaled_dot_product_attention`` with ``scale=1/d_head`` (muP's; the head count fixed, so the head dimension grows
with width), an ``nn.Linear`` head, and the logits multiplied by ``base_width / width`` in ``forward`` (muP's output
multiplier). The learning rates and the hidden matrices' init come from the harness (``optimizer=mup_groups
init=mup``), as docs/mup-by-hand.md shows::

    python -m coordcheck model=custom model._target_=coordcheck.testing.hand_gpt.build parametrization=none \\
        optimizer=mup_groups init=mup width=128,256,512 --multirun

The head beside a 1/width multiplier needs an init std constant in width (or zero), not ``nn.Linear``'s default
std ∝ fan_in^-1/2: ``head_init`` is ``"constant"`` (std ``init_std``, the default), ``"zero"`` or ``"fan_in"``
(nn.Linear's own, the mistake). ``output_mult=False`` drops the multiplier and ``attn_scale="sqrt"`` uses
``1/sqrt(d_head)``: the other two muP mistakes of the forward.

Tokens (B, T) -> logits (B, T, vocab_size).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["HandGPT", "build"]


class Block(nn.Module):
    def __init__(self, width: int, n_head: int, attn_scale: str):
        super().__init__()
        self.n_head, self.attn_scale = n_head, attn_scale
        self.ln_1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.fc_out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in self.qkv(self.ln_1(x)).split(C, dim=2))
        scale = 1.0 / hs if self.attn_scale == "d" else hs ** -0.5  # muP: 1/d_head
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)  # (B, nh, T, hs)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x))))


class HandGPT(nn.Module):
    def __init__(self, width: int, base_width: int = 64, vocab_size: int = 256, context: int = 64, n_layer: int = 2,
                 n_head: int = 4, init_std: float = 0.02, head_init: Literal["constant", "zero", "fan_in"] = "constant",
                 output_mult: bool = True, attn_scale: Literal["d", "sqrt"] = "d"):
        super().__init__()
        self.mult = base_width / width if output_mult else 1.0
        self.wte = nn.Embedding(vocab_size, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, n_head, attn_scale) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab_size, bias=False)
        if head_init == "constant":
            nn.init.normal_(self.head.weight, std=init_std)
        elif head_init == "zero":
            nn.init.zeros_(self.head.weight)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))  # (B, T, width)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x)) * self.mult  # (B, T, vocab_size)


def build(width: int, base_width: int = 64, **kwargs) -> HandGPT:
    """:class:`HandGPT` at ``width``; the harness passes ``base_width`` (this signature names it)."""
    return HandGPT(width, base_width, **kwargs)
