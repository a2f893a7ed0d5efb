"""LLaMA style: ``ModelArgs``, RMSNorm, rotary q/k, SwiGLU, blocks in an ``nn.ModuleDict``.

``llama_builder(width, n_layer=2, n_head=4, vocab_size=256, attn_scale="mup", **kw)`` ->
:class:`Transformer`, muP through the mup package: blocks in ``nn.ModuleDict``, RMSNorm, SwiGLU,
rotary q/k, ``F.scaled_dot_product_attention``; ``forward(tokens)`` returns logits (B, T, V). Bug:
``attn_scale="sqrt"``. Run with ``parametrization="mup", data="tokens"``. Its RMSNorm, SwiGLU
feed-forward and rotary helpers are shared with :mod:`coordcheck.testing.public_models.titan`.
"""

from __future__ import annotations

from dataclasses import dataclass

import mup
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["ModelArgs", "RMSNorm", "Transformer", "llama_builder"]


@dataclass
class ModelArgs:
    dim: int = 256
    n_layers: int = 2
    n_heads: int = 4
    vocab_size: int = 256
    multiple_of: int = 32  # SwiGLU hidden size rounded up to a multiple of this
    norm_eps: float = 1e-5
    max_seq_len: int = 64
    rope_theta: float = 10000.0
    attn_scale: str = "mup"  # "mup": 1/head_dim, "sqrt": 1/sqrt(head_dim) (the planted bug)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: Tensor) -> Tensor:
        output = self._norm(x.float()).type_as(x)
        return output * self.weight

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


def precompute_freqs(dim: int, end: int, theta: float = 10000.0) -> tuple[Tensor, Tensor]:
    """cos and sin tables, each (end, dim // 2), for rotary embeddings of head size ``dim``."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    return torch.cos(freqs), torch.sin(freqs)


def apply_rotary_emb(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate (B, T, H, D) by position, adjacent pairs as complex numbers (real arithmetic)."""
    x_ = x.float().reshape(*x.shape[:-1], -1, 2)  # (B, T, H, D/2, 2)
    x0, x1 = x_.unbind(-1)
    cos = cos[None, :, None, :]  # (1, T, 1, D/2)
    sin = sin[None, :, None, :]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        assert args.attn_scale in ("mup", "sqrt"), args.attn_scale
        self.n_heads = args.n_heads
        self.head_dim = args.dim // args.n_heads
        self.attn_scale = args.attn_scale
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, cos, sin), apply_rotary_emb(xk, cos, sin)
        xq, xk, xv = (t.transpose(1, 2) for t in (xq, xk, xv))  # (bs, n_heads, seqlen, head_dim)
        scale = 1.0 / self.head_dim if self.attn_scale == "mup" else None  # None: 1/sqrt(head_dim)
        output = F.scaled_dot_product_attention(xq, xk, xv, is_causal=True, scale=scale)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, multiple_of: int):
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.layer_id = layer_id
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, 4 * args.dim, args.multiple_of)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class Transformer(nn.Module):
    """LLaMA in muP (mup package): tokens (B, T) -> logits (B, T, vocab_size)."""

    def __init__(self, params: ModelArgs):
        super().__init__()
        assert params.dim % params.n_heads == 0
        self.params = params
        self.vocab_size = params.vocab_size
        self.n_layers = params.n_layers
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(i, params) for i in range(params.n_layers)})
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = mup.MuReadout(params.dim, params.vocab_size, bias=False, readout_zero_init=True)
        cos, sin = precompute_freqs(params.dim // params.n_heads, params.max_seq_len, params.rope_theta)
        self.register_buffer("freqs_cos", cos, persistent=False)
        self.register_buffer("freqs_sin", sin, persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """muP init, called again by the harness after ``mup.set_base_shapes``: var 1/fan_in for
        hidden matrices (1/(2 n_layers fan_in) on residual outputs), unit embeddings, zero readout."""
        nn.init.normal_(self.tok_embeddings.weight, std=1.0)
        for layer in self.layers.values():
            for lin in (layer.attention.wq, layer.attention.wk, layer.attention.wv,
                        layer.feed_forward.w1, layer.feed_forward.w3):
                nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)
            for lin in (layer.attention.wo, layer.feed_forward.w2):
                nn.init.normal_(lin.weight, std=(2 * self.n_layers * lin.in_features) ** -0.5)
            layer.attention_norm.reset_parameters()
            layer.ffn_norm.reset_parameters()
        self.norm.reset_parameters()
        self.output.reset_parameters()

    def forward(self, tokens: Tensor) -> Tensor:
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        cos, sin = self.freqs_cos[:seqlen], self.freqs_sin[:seqlen]
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        h = self.norm(h)
        return self.output(h).float()


def llama_builder(width: int, n_layer: int = 2, n_head: int = 4, vocab_size: int = 256, attn_scale: str = "mup",
                  **kw) -> Transformer:
    """LLaMA-style muP transformer with ``dim=width``; kw are further :class:`ModelArgs` fields."""
    return Transformer(ModelArgs(dim=width, n_layers=n_layer, n_heads=n_head, vocab_size=vocab_size,
                                 attn_scale=attn_scale, **kw))
