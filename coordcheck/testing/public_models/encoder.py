"""mup examples/Transformer style: sequence-first tensors, a ``log_softmax`` output, a ``MuReadout`` decoder.

``encoder_builder(width, n_layer=2, n_head=4, ntoken=256, attn_scale="mup", **kw)`` ->
:class:`TransformerModel`: ``forward(src)`` with ``src`` (T, B) returns ``log_softmax``
log-probabilities (T, B, ntoken); attention scores go through a functional softmax (no module to
hook). Readout ``mup.MuReadout``. Bug: ``attn_scale="sqrt"``. Run with ``parametrization="mup",
data=seq_first_tokens()``; :func:`seq_first_tokens` gives (T, B) token batches.
"""

from __future__ import annotations

import math

import mup
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["TransformerModel", "encoder_builder", "seq_first_tokens"]


def _normal_(p: Tensor, std: float) -> Tensor:
    """``mup.init.normal_`` once base shapes are set (std is the base width's), plain normal before."""
    if hasattr(p, "infshape"):
        return mup.init.normal_(p, std=std)
    with torch.no_grad():
        return p.normal_(0.0, std)


class PositionalEncoding(nn.Module):
    """Sinusoidal positions, a buffer (max_len, 1, d_model): added to (T, B, d_model)."""

    def __init__(self, d_model: int, dropout: float = 0.0, max_len: int = 512):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.pe[: x.size(0), :]
        return self.dropout(x)


class MultiheadAttention(nn.Module):
    """Hand-written multi-head attention on (T, B, E); scores through a functional softmax."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, attn_mult: float = 1.0,
                 attn_scale: str = "mup"):
        super().__init__()
        assert embed_dim % num_heads == 0, "embed_dim must be divisible by num_heads"
        assert attn_scale in ("mup", "sqrt"), attn_scale
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.attn_mult = attn_mult
        self.attn_scale = attn_scale
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.dropout = dropout

    def forward(self, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        tgt_len, bsz, embed_dim = x.size()
        # (T, B, E) -> (B, H, T, D)
        q = self.q_proj(x).view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        k = self.k_proj(x).view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        v = self.v_proj(x).view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        if self.attn_scale == "mup":
            scores = q @ k.transpose(-2, -1) * self.attn_mult / self.head_dim  # muP: 1/d
        else:
            scores = q @ k.transpose(-2, -1) * self.attn_mult / math.sqrt(self.head_dim)
        if attn_mask is not None:
            scores = scores + attn_mask
        attn = torch.softmax(scores, dim=-1)
        attn = F.dropout(attn, p=self.dropout, training=self.training)
        out = (attn @ v).permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
        return self.out_proj(out)


class TransformerEncoderLayer(nn.Module):
    """Post-LN encoder layer (PyTorch's default order): norm(x + attn(x)), norm(x + ff(x))."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int, dropout: float = 0.0,
                 attn_mult: float = 1.0, attn_scale: str = "mup"):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, attn_mult=attn_mult, attn_scale=attn_scale)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        src2 = self.self_attn(src, attn_mask=src_mask)
        src = self.norm1(src + self.dropout1(src2))
        src2 = self.linear2(self.dropout(F.relu(self.linear1(src))))
        src = self.norm2(src + self.dropout2(src2))
        return src


class TransformerModel(nn.Module):
    """Word-language-model Transformer in muP: src (T, B) -> log-probabilities (T, B, ntoken)."""

    def __init__(self, ntoken: int, ninp: int, nhead: int, nhid: int, nlayers: int, dropout: float = 0.0,
                 attn_mult: float = 1.0, attn_scale: str = "mup", init_std: float = 0.1, emb_std: float = 0.1):
        super().__init__()
        self.model_type = "Transformer"
        self.src_mask: Tensor | None = None
        self.ninp = ninp
        self.init_std = init_std
        self.emb_std = emb_std
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.layers = nn.ModuleList(
            [TransformerEncoderLayer(ninp, nhead, nhid, dropout, attn_mult, attn_scale) for _ in range(nlayers)]
        )
        self.encoder = nn.Embedding(ntoken, ninp)
        # muP: no `* math.sqrt(ninp)` on the embeddings, and a MuReadout decoder
        self.decoder = mup.MuReadout(ninp, ntoken, readout_zero_init=True)
        self.init_weights()

    @staticmethod
    def _generate_square_subsequent_mask(sz: int, device: torch.device | None = None) -> Tensor:
        return torch.triu(torch.full((sz, sz), float("-inf"), device=device), diagonal=1)

    def init_weights(self) -> None:
        """muP init: ``init_std`` is the base width's std; mup.init shrinks it as 1/sqrt(fan_in mult)."""
        _normal_(self.encoder.weight, std=self.emb_std)  # vector-like: constant
        for layer in self.layers:
            attn = layer.self_attn
            for lin in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj, layer.linear1, layer.linear2):
                _normal_(lin.weight, std=self.init_std)  # matrix-like: ~ 1/sqrt(fan_in)
                nn.init.zeros_(lin.bias)
            layer.norm1.reset_parameters()
            layer.norm2.reset_parameters()
        self.decoder.reset_parameters()  # zero readout

    def reset_parameters(self) -> None:
        """What the harness (and mup's examples) call after ``mup.set_base_shapes``."""
        self.init_weights()

    def forward(self, src: Tensor, has_mask: bool = True) -> Tensor:
        if has_mask:
            if self.src_mask is None or self.src_mask.size(0) != len(src) or self.src_mask.device != src.device:
                self.src_mask = self._generate_square_subsequent_mask(len(src), src.device)
        else:
            self.src_mask = None
        src = self.encoder(src)  # (T, B, ninp)
        src = self.pos_encoder(src)
        for layer in self.layers:
            src = layer(src, self.src_mask)
        output = self.decoder(src)
        return F.log_softmax(output, dim=-1)


def encoder_builder(width: int, n_layer: int = 2, n_head: int = 4, ntoken: int = 256, attn_scale: str = "mup",
                    **kw) -> TransformerModel:
    """Sequence-first muP encoder with ``ninp=width`` and ``nhid=4 * width``; kw go to :class:`TransformerModel`."""
    return TransformerModel(ntoken, width, n_head, 4 * width, n_layer, attn_scale=attn_scale, **kw)


def seq_first_tokens(seq_len: int = 16, batch_size: int = 2, vocab_size: int = 256,
                     seed: int = 0) -> tuple[Tensor, Tensor]:
    """Random tokens sequence-first: inputs and next-token targets, both (seq_len, batch_size) int64."""
    g = torch.Generator().manual_seed(seed)
    seq = torch.randint(0, vocab_size, (seq_len + 1, batch_size), generator=g)
    return seq[:-1], seq[1:]
