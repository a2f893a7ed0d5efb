"""A nanoGPT-mup-style GPT with muP and CompleteP written by hand: the depth known answer for user models.

Stage: build (a test model). Input: ``width``, ``depth``, ``base_width``, ``base_depth`` and the fields of
:class:`GPTConfig`. Output: a :class:`GPT` whose ``forward(idx, targets=None)`` returns ``(logits, loss)``, and its
own optimizer factory :func:`make_optimizer` (AdamW parameter groups, as nanoGPT's ``configure_optimizers`` builds
them), written the way EleutherAI nanoGPT-mup's ``completep`` branch writes its model (config object, fused
``c_attn``, ``F.scaled_dot_product_attention``, blocks in ``transformer.h``) — none of it through the harness's
``parametrization`` or ``depth_scaling``.

With m_N = n_embd / mup_base_width and m_L = n_layer / depth_base (CompleteP, Dey et al. 2025, Table 1):

* muP: hidden matrices (``c_attn``, ``c_fc``, the ``c_proj``\\ s) at init std ``init_std / sqrt(m_N)`` (∝ fan_in^-1/2,
  no GPT-2 1/sqrt(2L) factor: the branch multiplier replaces it), embeddings at ``init_std``, an untied ``lm_head``
  whose logits are multiplied by 1 / m_N, attention scores q·k / d_head;
* CompleteP: each residual branch × m_L^-α (``depth_alpha``; 1 = CompleteP, 0.5 = depth-μP) inside the block;
* :func:`make_optimizer`, per parameter:

  ============================================  ===================  =================  ============
  parameters                                    lr                   eps                weight decay
  ============================================  ===================  =================  ============
  hidden matrices (2-D, in ``transformer.h``)   lr·m_N^-1·m_L^(α-1)  eps·m_N^-1·m_L^-α  wd·m_N
  in-block norms and biases                     lr·m_L^(α-1)         eps·m_L^-α         0
  embeddings ``wte``, ``wpe``; ``lm_head``      lr                   eps                wd
  final norm ``ln_f``                           lr                   eps                0
  ============================================  ===================  =================  ============

  (AdamW's decay is lr·wd: wd·m_N keeps the hidden matrices' decay per step flat in width. The ε of in-block norms
  and biases follows their gradient, m_L^-α smaller, as ``coordcheck.setup.depth`` does for every in-block parameter;
  nanoGPT-mup multiplies its one global ε by m_N^-1·m_L^-α.)

:func:`build` is the builder (``branch_multiplier=False``: the multiplier dropped, everything else the same — the
case that must fail); :func:`build_no_multiplier` is that variant under its own name. Run with
``parametrization="none", optimizer=make_optimizer, output=0, loss="model", forward_targets=True, data="tokens"``
and ``depth_scaling`` left at ``none`` (the model and its factory do the depth scaling)::

    python -m coordcheck model=custom model._target_=coordcheck.testing.depth_models.build data=tokens \\
      parametrization=none optimizer=factory optimizer._target_=coordcheck.testing.depth_models.make_optimizer \\
      output=0 loss=model forward_targets=true width=64 base_width=64 depth=2,4,8,16 --multirun
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["GPTConfig", "GPT", "Block", "param_kinds", "make_optimizer", "build", "build_no_multiplier"]


@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 256
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    bias: bool = True
    init_std: float = 0.02  # at mup_base_width; hidden matrices get init_std / sqrt(m_N)
    mup_base_width: int = 64
    depth_base: int = 2  # the depth at which CompleteP is the identity
    depth_alpha: float = 1.0  # branch multiplier m_L^-alpha: 1 CompleteP, 0.5 depth-muP
    branch_multiplier: bool = True  # False = planted bug: branches added unscaled (lr and eps still depth-scaled)

    @property
    def width_mult(self) -> float:  # m_N
        return self.n_embd / self.mup_base_width

    @property
    def depth_mult(self) -> float:  # m_L
        return self.n_layer / self.depth_base


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v in one matrix
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        # muP: 1/d_head, not torch's 1/sqrt(d_head): q and k correlate as they train
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=True, scale=1.0 / hs)
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
    """Pre-LN block; CompleteP: x + m_L^-alpha * branch(ln(x)) for both branches."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)
        self.residual_scale = config.depth_mult ** -config.depth_alpha if config.branch_multiplier else 1.0

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.residual_scale * self.attn(self.ln_1(x))
        return x + self.residual_scale * self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """idx (B, T) [, targets (B, T)] -> (logits (B, T, vocab_size), loss or None)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)  # untied: muP scales it apart
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.init_std
        if isinstance(module, nn.Linear):
            if module is not self.lm_head:  # hidden: var ∝ 1/fan_in; lm_head: the 1/m_N multiplier in forward
                std /= math.sqrt(self.config.width_mult)
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)  # input weights: fan-in is finite

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        b, t = idx.size()
        assert t <= self.config.block_size, f"Cannot forward sequence of length {t}, block size is only " \
                                            f"{self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)  # (t,)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))  # (b, t, n_embd)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x) / self.config.width_mult  # muP: output multiplier 1 / m_N
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        return logits, loss


def param_kinds(model: GPT) -> dict[str, str]:
    """Each parameter's row of the table above: ``hidden``, ``block_vector`` (in-block norms and biases),
    ``embedding``, ``readout`` or ``final_norm``."""
    kinds = {}
    for name, p in model.named_parameters():
        if name.startswith("transformer.h."):
            kinds[name] = "hidden" if p.dim() >= 2 else "block_vector"
        elif name.startswith(("transformer.wte.", "transformer.wpe.")):
            kinds[name] = "embedding"
        elif name.startswith("transformer.ln_f."):
            kinds[name] = "final_norm"
        elif name.startswith("lm_head."):
            kinds[name] = "readout"
        else:
            raise ValueError(f"unhandled parameter {name}")
    return kinds


def make_optimizer(model: GPT, lr: float, weight_decay: float = 0.1, eps: float = 1e-8,
                   betas: tuple[float, float] = (0.9, 0.95)) -> torch.optim.AdamW:
    """AdamW with muP and CompleteP per group (the table above), from ``model.config`` alone."""
    cfg = model.config
    m_n, m_l, a = cfg.width_mult, cfg.depth_mult, cfg.depth_alpha
    rules = {  # kind: (lr factor, eps factor, weight decay)
        "hidden": (m_l ** (a - 1) / m_n, m_l ** -a / m_n, weight_decay * m_n),
        "block_vector": (m_l ** (a - 1), m_l ** -a, 0.0),
        "embedding": (1.0, 1.0, weight_decay),
        "readout": (1.0, 1.0, weight_decay),
        "final_norm": (1.0, 1.0, 0.0),
    }
    kinds = param_kinds(model)
    params = dict(model.named_parameters())
    groups = []
    for kind, (lr_f, eps_f, wd) in rules.items():
        members = [params[n] for n, k in kinds.items() if k == kind and params[n].requires_grad]
        if members:
            groups.append({"params": members, "name": kind, "lr": lr * lr_f, "eps": eps * eps_f, "weight_decay": wd})
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def build(width: int, depth: int = 2, base_width: int = 64, base_depth: int = 2, branch_multiplier: bool = True,
          **config) -> GPT:
    """The GPT at ``n_embd=width``, ``n_layer=depth``; ``config``: other :class:`GPTConfig` fields."""
    return GPT(GPTConfig(n_embd=width, n_layer=depth, mup_base_width=base_width, depth_base=base_depth,
                         branch_multiplier=branch_multiplier, **config))


def build_no_multiplier(width: int, depth: int = 2, base_width: int = 64, base_depth: int = 2, **config) -> GPT:
    """:func:`build` with the branch multiplier dropped (the known failure)."""
    return build(width, depth, base_width, base_depth, branch_multiplier=False, **config)
