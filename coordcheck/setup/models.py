"""Built-in model builders: a muP GPT and a muP MLP.

Stage: build. Input: ``width`` (and the builder's own keyword arguments). Output: an
``nn.Module`` whose readout is a ``mup.MuReadout``. Any importable callable
``build(width: int, **kwargs) -> nn.Module`` is a model for coordcheck; these two are the
defaults (``model=gpt``, ``model=mlp``).

Both follow the mup examples: the constructor calls ``reset_parameters()``, and the
harness calls it again after ``mup.set_base_shapes`` so that the initialisation sees the
parameters' infinite shapes. Initialisation is written with plain ``torch.nn.init``
scaled by fan-in, which is muP-correct for hidden (width x width) matrices and constant
for input matrices; readout and query are zero-initialised, as muP recommends.

Modules may carry ``coordcheck_role`` / ``coordcheck_layer_index`` attributes to
override the probes' defaults (see ``coordcheck.record.probes``).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from mup import MuReadout
from torch import nn

from coordcheck.core.errors import CoordCheckError, check_width  # check_width: re-exported (its home was here)

__all__ = ["gpt", "mlp", "GPT", "MLP", "AttentionScores", "check_width"]


class AttentionScores(nn.Identity):
    """Named identity on the pre-softmax attention logits, so the probes see them."""

    coordcheck_role = "attention"


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, n_head: int, context: int, attn_mult: float):
        super().__init__()
        self.n_head = n_head
        self.attn_mult = attn_mult
        self.c_q = nn.Linear(width, width, bias=False)
        self.c_k = nn.Linear(width, width, bias=False)
        self.c_v = nn.Linear(width, width, bias=False)
        self.c_proj = nn.Linear(width, width, bias=False)
        self.scores = AttentionScores()
        self.register_buffer("mask", torch.ones(context, context, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        hs = C // self.n_head
        q = self.c_q(x).view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = self.c_k(x).view(B, T, self.n_head, hs).transpose(1, 2)
        v = self.c_v(x).view(B, T, self.n_head, hs).transpose(1, 2)
        # muP: 1/d_head, not 1/sqrt(d_head): q and k become correlated during training,
        # so q.k grows like d_head and only 1/d keeps the logits O(1) as width grows.
        att = self.scores((q @ k.transpose(-2, -1)) * (self.attn_mult / hs))  # (B, nh, T, T)
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class FeedForward(nn.Module):
    def __init__(self, width: int, mlp_ratio: int):
        super().__init__()
        self.c_fc = nn.Linear(width, mlp_ratio * width, bias=False)
        self.act = nn.GELU()
        self.c_proj = nn.Linear(mlp_ratio * width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    """Pre-LN transformer block: x + m * attn(ln(x)), then x + m * mlp(ln(x)); m = the branch multiplier
    (depth / base_depth)^-alpha under depth scaling (coordcheck.setup.depth), else 1."""

    def __init__(self, width: int, n_head: int, context: int, attn_mult: float, mlp_ratio: int,
                 branch_mult: float = 1.0):
        super().__init__()
        self.branch_mult = branch_mult
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, n_head, context, attn_mult)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = FeedForward(width, mlp_ratio)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.branch_mult * self.attn(self.ln_1(x))
        return x + self.branch_mult * self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Decoder-only transformer in muP: tokens (B, T) -> logits (B, T, vocab_size).

    Depth: ``n_layer`` blocks. With ``depth_alpha`` > 0 (``depth_scaling=depth_mup`` 0.5, ``completep`` 1) each
    residual branch is multiplied by (n_layer / base_depth)^-depth_alpha, and the output projections' init keeps
    GPT-2's factor at ``base_depth`` (so the model at ``base_depth`` is the unscaled one), not at ``n_layer``: the
    multiplier replaces it. ``residual_init``: ``gpt2`` (std (fan_in * 2 * L)^-1/2 on the output projections, GPT-2's
    depth scaling by init) or ``fan_in`` (std fan_in^-1/2, no depth factor).
    """

    def __init__(
        self,
        width: int,
        vocab_size: int = 256,
        context: int = 64,
        n_layer: int = 2,
        n_head: int = 4,
        mlp_ratio: int = 4,
        attn_mult: float = 1.0,
        output_mult: float = 1.0,
        emb_std: float = 1.0,
        depth_alpha: float = 0.0,
        base_depth: int | None = None,
        residual_init: Literal["gpt2", "fan_in"] = "gpt2",
    ):
        super().__init__()
        width = check_width(width, divisor=n_head, divisor_name="n_head")
        if residual_init not in ("gpt2", "fan_in"):
            raise CoordCheckError(f"model.residual_init must be gpt2 or fan_in, got {residual_init!r}")
        self.n_layer = n_layer
        base_depth = n_layer if base_depth is None else base_depth
        self.branch_mult = (n_layer / base_depth) ** -depth_alpha if depth_alpha else 1.0
        # GPT-2's 1/sqrt(2L) on the output projections, at the depth whose model is the unscaled one
        self.init_depth = {"gpt2": base_depth if depth_alpha else n_layer, "fan_in": None}[residual_init]
        self.emb_std = emb_std
        self.context = context
        self.wte = nn.Embedding(vocab_size, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(
            Block(width, n_head, context, attn_mult, mlp_ratio, self.branch_mult) for _ in range(n_layer)
        )
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = MuReadout(width, vocab_size, bias=False, readout_zero_init=True, output_mult=output_mult)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        nn.init.normal_(self.wte.weight, std=self.emb_std)  # input weights: fan-in is finite
        nn.init.normal_(self.wpe.weight, std=self.emb_std)
        for block in self.blocks:
            for lin in (block.attn.c_k, block.attn.c_v, block.mlp.c_fc):
                nn.init.normal_(lin.weight, std=lin.in_features**-0.5)  # hidden: var 1/fan_in
            for lin in (block.attn.c_proj, block.mlp.c_proj):  # residual branches
                depth_factor = 2 * self.init_depth if self.init_depth else 1
                nn.init.normal_(lin.weight, std=(lin.in_features * depth_factor) ** -0.5)
            nn.init.zeros_(block.attn.c_q.weight)  # zero query: uniform attention at init
            block.ln_1.reset_parameters()
            block.ln_2.reset_parameters()
        self.ln_f.reset_parameters()
        self.lm_head.reset_parameters()  # zero readout

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        if T > self.context:
            raise CoordCheckError(f"sequence length {T} exceeds the model context {self.context}: raise model.context")
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, width)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def gpt(width: int, n_layer: int = 2, depth_alpha: float = 0.0, base_depth: int | None = None, **kwargs) -> GPT:
    """Build the built-in muP GPT at ``width`` (d_model) with ``n_layer`` blocks; see :class:`GPT` for kwargs
    (the depth keywords are named here so that the harness hands them over: ``coordcheck.setup.depth``)."""
    return GPT(width, n_layer=n_layer, depth_alpha=depth_alpha, base_depth=base_depth, **kwargs)


ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


class MLPBlock(nn.Module):
    def __init__(self, fan_in: int, width: int, activation: str, bias: bool):
        super().__init__()
        self.fc = nn.Linear(fan_in, width, bias=bias)
        self.act = ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


class MLP(nn.Module):
    """muP MLP: vectors (B, in_dim) -> logits (B, out_dim); ``depth`` hidden layers."""

    def __init__(
        self,
        width: int,
        in_dim: int = 32,
        out_dim: int = 10,
        depth: int = 3,
        activation: Literal["relu", "gelu", "tanh"] = "relu",
        bias: bool = True,
        output_mult: float = 1.0,
        readout_zero_init: bool = True,
    ):
        super().__init__()
        width = check_width(width)
        if activation not in ACTIVATIONS:
            raise CoordCheckError(f"unknown activation {activation!r}: use one of {sorted(ACTIVATIONS)}")
        self.input = MLPBlock(in_dim, width, activation, bias)
        self.blocks = nn.ModuleList(MLPBlock(width, width, activation, bias) for _ in range(depth - 1))
        self.readout = MuReadout(width, out_dim, bias=bias, readout_zero_init=readout_zero_init,
                                 output_mult=output_mult)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        for block in [self.input, *self.blocks]:
            fan_in = block.fc.in_features
            nn.init.normal_(block.fc.weight, std=math.sqrt(2.0 / fan_in))  # He init: var 2/fan_in
            if block.fc.bias is not None:
                nn.init.zeros_(block.fc.bias)
        self.readout.reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.input(x)
        for block in self.blocks:
            x = block(x)
        return self.readout(x)


def mlp(width: int, depth: int = 3, **kwargs) -> MLP:
    """Build the built-in muP MLP at ``width`` with ``depth`` hidden layers; see :class:`MLP` for kwargs."""
    return MLP(width, depth=depth, **kwargs)
