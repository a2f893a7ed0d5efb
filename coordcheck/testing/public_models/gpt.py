"""nanoGPT-mup style: a config dataclass, muP by hand, ``(logits, loss)`` outputs.

``gpt_builder(width, base_width=64, **config)`` -> :class:`GPT`. muP by hand: ``lm_head`` is a
plain ``nn.Linear`` with the output multiplier ``mup_base_width / n_embd`` applied to the logits,
hidden matrices get Adam lr ``lr * base / width`` through :func:`configure_optimizers`.
``forward(idx, targets=None)`` returns ``(logits, loss)``; only the ``targets`` path applies the
multiplier (without targets it returns the last position's logits, unscaled, as nanoGPT does), and
the loss uses ``targets.view(-1)`` (contiguous targets needed). Bugs: ``attn_scale="sqrt"``
(1/sqrt(d_head) attention), ``output_mult=False`` (no output multiplier), ``scale_hidden_lr=False``
(hidden lr not scaled), ``lr_scaled_twice=True`` (hidden lr scaled by ``(base / width)^2``: the
learning rate's optimum moves up with width). Run with ``parametrization="none",
optimizer=configure_optimizers, forward_targets=True, loss="model", output=0, data="tokens"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["GPTConfig", "GPT", "configure_optimizers", "gpt_builder"]


@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 256
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True
    init_std: float = 0.02  # at mup_base_width; hidden matrices get init_std * sqrt(base / width)
    mup_base_width: int = 64
    attn_scale: str = "mup"  # "mup": 1/d_head, "sqrt": 1/sqrt(d_head) (the planted bug)
    output_mult: bool = True  # False = planted bug: logits not multiplied by base / width
    scale_hidden_lr: bool = True  # False = planted bug: hidden matrices keep the full Adam lr
    lr_scaled_twice: bool = False  # True = planted bug: hidden matrices get lr * (base / width)^2

    @property
    def width_mult(self) -> float:
        return self.n_embd / self.mup_base_width


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch's has no ``bias=False`` before 2.1)."""

    def __init__(self, ndim: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        assert config.attn_scale in ("mup", "sqrt"), config.attn_scale
        # key, query, value projections for all heads, in one matrix
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.attn_scale = config.attn_scale

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hs = C // self.n_head
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        # muP: 1/d_head (q.k grows like d_head once q and k correlate); None is torch's 1/sqrt(d_head)
        scale = 1.0 / hs if self.attn_scale == "mup" else None
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0.0, is_causal=True, scale=scale
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    """nanoGPT with hand-written muP: idx (B, T) [, targets (B, T)] -> (logits, loss)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        # not tied to wte, and not a MuReadout: the output multiplier is applied in forward
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.output_mult = 1.0 / config.width_mult if config.output_mult else 1.0
        self.apply(self._init_weights)
        # scaled init of the residual projections, per GPT-2
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(
                    p, mean=0.0, std=config.init_std / math.sqrt(config.width_mult) / math.sqrt(2 * config.n_layer)
                )

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.init_std
        if isinstance(module, nn.Linear):
            if module is not self.lm_head:  # hidden: var ~ 1/fan_in; lm_head: output_mult does the 1/width
                std = std / math.sqrt(self.config.width_mult)
            torch.nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=std)  # input weights: constant std

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        device = idx.device
        b, t = idx.size()
        assert t <= self.config.block_size, \
            f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device)  # (t,)

        tok_emb = self.transformer.wte(idx)  # (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos)  # (t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)

        if targets is not None:
            logits = self.lm_head(x) * self.output_mult  # muP: logits * base / width
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            # inference-time mini-optimization: only the last position (and, as in the wild, no multiplier)
            logits = self.lm_head(x[:, [-1], :])  # (b, 1, vocab)
            loss = None
        return logits, loss


def configure_optimizers(model: GPT, lr: float) -> torch.optim.AdamW:
    """AdamW, nanoGPT groups (decay on 2-D params), muP lr: hidden matrices get ``lr * base / width``.

    Hidden matrices are the 2-D weights inside ``transformer.h`` (c_attn, c_proj, c_fc);
    embeddings, norms, biases and lm_head keep ``lr`` (with Adam and the output multiplier
    in forward, that is muP).
    """
    cfg = model.config
    hidden_lr = lr / cfg.width_mult ** (2 if cfg.lr_scaled_twice else 1) if cfg.scale_hidden_lr else lr
    param_dict = {pn: p for pn, p in model.named_parameters() if p.requires_grad}
    hidden = [p for n, p in param_dict.items() if p.dim() >= 2 and n.startswith("transformer.h.")]
    decay = [p for n, p in param_dict.items() if p.dim() >= 2 and not n.startswith("transformer.h.")]
    nodecay = [p for n, p in param_dict.items() if p.dim() < 2]
    optim_groups = [
        {"params": hidden, "weight_decay": 0.1, "lr": hidden_lr},
        {"params": decay, "weight_decay": 0.1, "lr": lr},
        {"params": nodecay, "weight_decay": 0.0, "lr": lr},
    ]
    return torch.optim.AdamW(optim_groups, lr=lr, betas=(0.9, 0.95))


def gpt_builder(width: int, base_width: int = 64, **kwargs) -> GPT:
    """nanoGPT-mup GPT with ``n_embd=width``; kwargs are :class:`GPTConfig` fields (the bugs too)."""
    return GPT(GPTConfig(n_embd=width, mup_base_width=base_width, **kwargs))
