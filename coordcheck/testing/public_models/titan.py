"""torchtitan / maester style: muP written by hand on a LLaMA, ``init_weights()``, a fixed head_dim (heads grow).

``titan_llama_builder(width, head_dim=None, n_heads=None, base_width=128, **kw)`` ->
:class:`TitanTransformer`: ``init_weights()`` with block init ``init_std / sqrt(m)``
(``m = width / base_width``), the final hidden state multiplied by ``1/m`` before a plain
``nn.Linear`` output, attention and feed-forward matrices at AdamW ``lr / m`` through
:func:`titan_mup_optimizer`, and ``attn_scale = 1/head_dim`` passed to
``F.scaled_dot_product_attention``. The head dimension is **fixed** (``head_dim``, default 128; the
number of heads grows with width, as torchtitan configs have it) unless ``n_heads`` is given (then
the head dimension grows with width). ``attn_scale="sqrt"`` (1/sqrt(head_dim)) is a width bug only
in the second case. Run with ``parametrization="none", optimizer=titan_mup_optimizer, data="tokens"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coordcheck.testing.public_models.llama import FeedForward, RMSNorm, apply_rotary_emb, precompute_freqs

__all__ = ["TitanModelArgs", "TitanTransformer", "titan_mup_optimizer", "titan_llama_builder"]


@dataclass
class TitanModelArgs:
    dim: int = 1024
    n_layers: int = 2
    n_heads: int = 8
    vocab_size: int = 256
    multiple_of: int = 32
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 64
    init_std: float = 0.02  # at the base width; blocks get init_std / sqrt(mup_width_mul)

    # muP, set by the training config as torchtitan-derived trainers do
    enable_mup: bool = True
    mup_input_alpha: float = 1.0
    mup_output_alpha: float = 1.0
    mup_width_mul: float = 1.0  # = dim / base_dim
    attn_scale: str = "mup"  # "mup": 1/head_dim, "sqrt": 1/sqrt(head_dim) (a bug only if head_dim grows with dim)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


class TitanAttention(nn.Module):
    def __init__(self, model_args: TitanModelArgs):
        super().__init__()
        assert model_args.attn_scale in ("mup", "sqrt"), model_args.attn_scale
        self.n_heads = model_args.n_heads
        self.head_dim = model_args.head_dim
        self.wq = nn.Linear(model_args.dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(model_args.dim, self.n_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(model_args.dim, self.n_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, model_args.dim, bias=False)
        mup = model_args.enable_mup and model_args.attn_scale == "mup"
        self.attn_scale = 1.0 / self.head_dim if mup else 1.0 / math.sqrt(self.head_dim)

    def init_weights(self, init_std: float) -> None:
        for linear in (self.wq, self.wk, self.wv, self.wo):
            nn.init.normal_(linear.weight, mean=0.0, std=init_std)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        bs, seqlen, _ = x.shape
        # -1 infers n_heads, as tensor-parallel code that shards the heads writes it
        q = self.wq(x).view(bs, seqlen, -1, self.head_dim)
        k = self.wk(x).view(bs, seqlen, -1, self.head_dim)
        v = self.wv(x).view(bs, seqlen, -1, self.head_dim)
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (bs, n_heads, seqlen, head_dim)
        output = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.attn_scale)
        output = output.transpose(1, 2).contiguous().view(bs, seqlen, -1)
        return self.wo(output)


class TitanFeedForward(FeedForward):
    """The LLaMA SwiGLU feed-forward (``llama.FeedForward``), with torchtitan's explicit ``init_weights``."""

    def init_weights(self, init_std: float) -> None:
        for linear in (self.w1, self.w2, self.w3):
            nn.init.normal_(linear.weight, mean=0.0, std=init_std)


class TitanBlock(nn.Module):
    def __init__(self, layer_id: int, model_args: TitanModelArgs):
        super().__init__()
        self.layer_id = layer_id
        self.attention = TitanAttention(model_args)
        self.feed_forward = TitanFeedForward(model_args.dim, 4 * model_args.dim, model_args.multiple_of)
        self.attention_norm = RMSNorm(model_args.dim, eps=model_args.norm_eps)
        self.ffn_norm = RMSNorm(model_args.dim, eps=model_args.norm_eps)
        # muP: hidden matrices' std shrinks like 1/sqrt(width) (variance 1/fan_in up to the base width's constant)
        scale = math.sqrt(model_args.mup_width_mul) if model_args.enable_mup else 1.0
        self.weight_init_std = model_args.init_std / scale

    def init_weights(self) -> None:
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std)
        self.feed_forward.init_weights(self.weight_init_std)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class TitanTransformer(nn.Module):
    """A torchtitan-derived LLaMA with muP written by hand: tokens (B, T) -> logits (B, T, vocab_size)."""

    def __init__(self, model_args: TitanModelArgs):
        super().__init__()
        assert model_args.n_heads > 0 and model_args.dim % model_args.n_heads == 0, (model_args.dim,
                                                                                      model_args.n_heads)
        self.model_args = model_args
        self.tok_embeddings = nn.Embedding(model_args.vocab_size, model_args.dim)
        cos, sin = precompute_freqs(model_args.head_dim, model_args.max_seq_len, model_args.rope_theta)
        self.register_buffer("freqs_cos", cos, persistent=False)
        self.register_buffer("freqs_sin", sin, persistent=False)
        self.layers = nn.ModuleDict({str(i): TitanBlock(i, model_args) for i in range(model_args.n_layers)})
        self.norm = RMSNorm(model_args.dim, eps=model_args.norm_eps)
        self.output = nn.Linear(model_args.dim, model_args.vocab_size, bias=False)
        self.init_weights()

    def init_weights(self) -> None:
        """Embeddings and output at ``init_std`` (width-independent), blocks at ``init_std / sqrt(m)``."""
        nn.init.normal_(self.tok_embeddings.weight, std=self.model_args.init_std)
        for layer in self.layers.values():
            layer.init_weights()
        self.norm.reset_parameters()
        nn.init.normal_(self.output.weight, std=self.model_args.init_std)

    def forward(self, tokens: Tensor) -> Tensor:
        args = self.model_args
        h = self.tok_embeddings(tokens)
        if args.enable_mup:
            h = h * args.mup_input_alpha
        seqlen = tokens.shape[1]
        cos, sin = self.freqs_cos[:seqlen], self.freqs_sin[:seqlen]
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        h = self.norm(h)
        if args.enable_mup:  # muP's output multiplier, on h so the readout's output is what is trained on
            h = h * (args.mup_output_alpha / args.mup_width_mul)
        return self.output(h)


def titan_mup_optimizer(model: TitanTransformer, lr: float) -> torch.optim.AdamW:
    """AdamW with muP learning rates: attention and feed-forward matrices at ``lr / m``; embeddings, norms and
    the output at ``lr`` (with the ``1/m`` output multiplier in forward, that is muP for Adam)."""
    args = model.model_args
    m = args.mup_width_mul if args.enable_mup else 1.0
    hidden = [p for layer in model.layers.values() for mod in (layer.attention, layer.feed_forward)
              for p in mod.parameters()]
    ids = {id(p) for p in hidden}
    rest = [p for p in model.parameters() if id(p) not in ids]
    groups = [{"params": hidden, "lr": lr / m}, {"params": rest, "lr": lr}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), weight_decay=0.1)


def titan_llama_builder(width: int, head_dim: int | None = None, n_heads: int | None = None, base_width: int = 128,
                        **kw) -> TitanTransformer:
    """torchtitan-style muP LLaMA with ``dim=width``: either ``head_dim`` fixed (default 128; the number of heads
    ``width / head_dim`` grows with width, as torchtitan configs do) or ``n_heads`` fixed (the head dimension
    ``width / n_heads`` grows); ``mup_width_mul = width / base_width``; kw are further :class:`TitanModelArgs`
    fields."""
    if head_dim is not None and n_heads is not None:
        raise ValueError("give head_dim (fixed; heads grow with width) or n_heads (fixed; head_dim grows), not both")
    if n_heads is None:
        head_dim = head_dim or 128
        if width % head_dim:
            raise ValueError(f"width {width} is not a multiple of head_dim {head_dim}")
        n_heads = width // head_dim
    return TitanTransformer(TitanModelArgs(dim=width, n_heads=n_heads, mup_width_mul=width / base_width, **kw))
