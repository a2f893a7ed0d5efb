"""Built-in mixture-of-experts transformer (``model=moe``): top-k router, experts, optionally a shared expert.

Stage: build. Input: ``width`` (d_model) and the knobs below. Output: an ``nn.Module`` that is muP-correct under
the default ``parametrization=mup``, each knob switchable:

* The **router** maps the width to the number of experts — one dimension grows, like a readout, so muP treats it as
  an output weight (Tensor Programs V, Table 3; Małaśnicki et al. 2025, "μ-Parameterization for Mixture of Experts",
  arXiv 2508.09752, class it so): ``router="mureadout"`` (default) is a ``mup.MuReadout`` — its logits multiplied by
  ``1 / width_mult``, its Adam learning rate constant, which together are Table 3's learning rate ∝ 1/fan_in.
  ``router="linear"`` is a plain ``nn.Linear`` at std fan_in^-1/2, as a hidden matrix is initialised (the usual
  mistake; under ``parametrization=mup`` it is reported as not fitting muP, naming the router).
* **Top-k routing**: softmax over the router logits, the ``top_k`` largest kept and renormalised (Mixtral, Qwen3-MoE;
  ``renormalize=False``: the kept probabilities as they are, as OLMoE's and Qwen2-MoE's ``norm_topk_prob=False`` and
  Switch Transformer's top-1 — the gates then sum to about ``top_k / n_experts`` at init, so the layer's output
  shrinks as the number of experts grows).
* **Experts**: ``n_experts`` two-layer GELU MLPs of hidden size ``round(expert_ratio * width)`` (a fraction for
  fine-grained experts: the harness's ``granularity=true`` keeps ``n_experts * expert_ratio`` fixed), stored as 3-D
  parameters (``experts_as="tensor"``: experts × out × in, the expert dimension fixed in width) or as an
  ``nn.ModuleList`` of linear layers (``experts_as="list"``). Both are hidden matrices: std fan_in^-1/2, learning
  rate ∝ 1/width
  (MuAdam scales a parameter whose two last dimensions grow).
* ``shared_expert=True`` adds one always-on expert (DeepSeek-MoE, Qwen-MoE) beside the routed ones.
* ``balance_loss`` and ``z_loss``: the auxiliary losses left in the training loss, as MoEs are trained — Switch
  Transformer's load balance (``n_experts * sum_e f_e P_e``) and ST-MoE's router z-loss (``mean(logsumexp(logits)^2)``),
  each times its coefficient. Called with targets (``loss=model forward_targets=true output=0``) the model returns
  ``(logits, loss)``.

Every token is computed by every expert and weighted by its (sparse) gate: exact top-k routing without token
dispatch, cheap at the widths a coordinate check uses on a CPU.
"""

from __future__ import annotations

import inspect

import torch
from mup import MuReadout
from torch import nn
from torch.nn import functional as F

from coordcheck.core.errors import CoordCheckError, check_width
from coordcheck.setup.models import CausalSelfAttention

__all__ = ["MoE", "MoEBlock", "MoETransformer", "Router", "moe"]

ROUTERS = ("mureadout", "linear")
EXPERTS_AS = ("tensor", "list")


class Router(nn.Module):
    """The router: logits over the experts, the top-k gates (renormalised softmax) and their indices."""

    def __init__(self, width: int, n_experts: int, top_k: int, kind: str = "mureadout", zero_init: bool = False,
                 renormalize: bool = True):
        super().__init__()
        self.top_k = top_k
        self.renormalize = renormalize
        self.kind = kind
        self.zero_init = zero_init
        self.gate = (MuReadout(width, n_experts, bias=False, readout_zero_init=zero_init) if kind == "mureadout"
                     else nn.Linear(width, n_experts, bias=False))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        if self.kind == "mureadout" and not self.zero_init:
            # mup's convention for a MuReadout (set_base_shapes rescales nn.Linear's fan_in^-1/2 by width_mult^1/2):
            # std constant in width, the 1/width_mult in the forward — logits ∝ width^-1/2 at init (TP5's output
            # weights: std 1/fan_in); without base shapes (parametrization=sp) nn.Linear's own init
            infshape = getattr(self.gate.weight, "infshape", None)
            mult = infshape.width_mult() if infshape is not None else 1.0
            nn.init.normal_(self.gate.weight, std=(self.gate.in_features / mult) ** -0.5)
        elif self.zero_init:
            nn.init.zeros_(self.gate.weight)
        else:
            nn.init.normal_(self.gate.weight, std=self.gate.in_features ** -0.5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits = self.gate(x)  # (tokens, n_experts)
        probs = torch.softmax(logits, dim=-1)
        gates, index = probs.topk(self.top_k, dim=-1)
        return logits, gates / gates.sum(dim=-1, keepdim=True) if self.renormalize else gates, index


class Expert(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Experts(nn.Module):
    """``n`` expert MLPs as two 3-D parameters (experts × out × in), every token through every expert."""

    def __init__(self, n: int, width: int, hidden: int):
        super().__init__()
        self.up = nn.Parameter(torch.empty(n, hidden, width))
        self.down = nn.Parameter(torch.empty(n, width, hidden))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        nn.init.normal_(self.up, std=self.up.shape[-1] ** -0.5)  # hidden: var 1/fan_in, fan_in the last dimension
        nn.init.normal_(self.down, std=self.down.shape[-1] ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (tokens, width) -> (tokens, experts, width)
        h = F.gelu(torch.einsum("td,ehd->teh", x, self.up))
        return torch.einsum("teh,edh->ted", h, self.down)


class MoE(nn.Module):
    """A mixture-of-experts feed-forward layer: (B, T, width) -> (B, T, width)."""

    def __init__(self, width: int, n_experts: int, top_k: int, expert_ratio: float, router: str, experts_as: str,
                 shared_expert: bool, router_zero_init: bool, renormalize: bool = True):
        super().__init__()
        hidden = max(1, round(expert_ratio * width))
        self.router = Router(width, n_experts, top_k, router, router_zero_init, renormalize)
        self.experts = (Experts(n_experts, width, hidden) if experts_as == "tensor"
                        else nn.ModuleList(Expert(width, hidden) for _ in range(n_experts)))
        self.shared = Expert(width, hidden) if shared_expert else None
        self.aux = False  # set by the model when its loss has a load-balancing or z-loss term

    @torch.no_grad()
    def reset_parameters(self) -> None:
        self.router.reset_parameters()
        experts = [self.experts] if isinstance(self.experts, Experts) else list(self.experts)
        for e in experts + ([self.shared] if self.shared is not None else []):
            if isinstance(e, Experts):
                e.reset_parameters()
            else:
                for lin in (e.fc1, e.fc2):
                    nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        flat = x.reshape(-1, C)
        logits, gates, index = self.router(flat)
        if self.aux:  # the auxiliary losses, kept for the model's loss (only when a coefficient asks for them):
            n = logits.shape[-1]  # Switch's load balance n * sum_e f_e * P_e (f_e: the share of top-k slots that go
            share = torch.zeros(n, dtype=logits.dtype, device=logits.device).index_add_(  # to expert e, P_e: its
                0, index.flatten(), torch.ones(index.numel(), dtype=logits.dtype, device=logits.device)
            ) / index.numel()  # mean probability) and ST-MoE's z-loss mean(logsumexp^2)
            self.balance = n * (share * torch.softmax(logits, dim=-1).mean(0)).sum()
            self.z = torch.logsumexp(logits, dim=-1).square().mean()
        weight = torch.zeros(flat.shape[0], self.router.gate.out_features, dtype=flat.dtype, device=flat.device)
        weight = weight.scatter(1, index, gates.to(flat.dtype))  # (tokens, experts), zero outside the top k
        if isinstance(self.experts, Experts):
            y = torch.einsum("te,ted->td", weight, self.experts(flat))
        else:
            y = sum(weight[:, e, None] * expert(flat) for e, expert in enumerate(self.experts))
        if self.shared is not None:
            y = y + self.shared(flat)
        return y.reshape(B, T, C)


class MoEBlock(nn.Module):
    """Pre-LN block: x + attn(ln(x)), then x + moe(ln(x))."""

    def __init__(self, width: int, n_head: int, context: int, moe: MoE):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, n_head, context, attn_mult=1.0)
        self.ln_2 = nn.LayerNorm(width)
        self.moe = moe

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.moe(self.ln_2(x))


class MoETransformer(nn.Module):
    """Decoder-only mixture-of-experts transformer in muP: tokens (B, T) -> logits (B, T, vocab_size). Attention as
    the built-in GPT's (1/d_head, zero query); each block's feed-forward layer is a :class:`MoE`."""

    def __init__(self, width: int, vocab_size: int = 256, context: int = 64, n_layer: int = 2, n_head: int = 4,
                 n_experts: int = 8, top_k: int = 2, expert_ratio: float = 1, router: str = "mureadout",
                 experts_as: str = "tensor", shared_expert: bool = False, router_zero_init: bool = False,
                 output_mult: float = 1.0, balance_loss: float = 0.0, z_loss: float = 0.0, renormalize: bool = True):
        super().__init__()
        width = check_width(width, divisor=n_head, divisor_name="n_head")
        if router not in ROUTERS:
            raise CoordCheckError(f"model.router must be one of {list(ROUTERS)}, got {router!r}")
        if experts_as not in EXPERTS_AS:
            raise CoordCheckError(f"model.experts_as must be one of {list(EXPERTS_AS)}, got {experts_as!r}")
        if not 1 <= top_k <= n_experts:
            raise CoordCheckError(f"model.top_k must be between 1 and model.n_experts ({n_experts}), got {top_k}")
        if not expert_ratio > 0:
            raise CoordCheckError(f"model.expert_ratio must be a positive number, got {expert_ratio}")
        if balance_loss < 0 or z_loss < 0:
            raise CoordCheckError(f"model.balance_loss and model.z_loss are loss coefficients >= 0, got "
                                  f"{balance_loss} and {z_loss}")
        self.balance_loss, self.z_loss = balance_loss, z_loss
        self.context = context
        self.wte = nn.Embedding(vocab_size, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(
            MoEBlock(width, n_head, context, MoE(width, n_experts, top_k, expert_ratio, router, experts_as,
                                                 shared_expert, router_zero_init, renormalize))
            for _ in range(n_layer))
        for block in self.blocks:
            block.moe.aux = bool(balance_loss or z_loss)
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = MuReadout(width, vocab_size, bias=False, readout_zero_init=True, output_mult=output_mult)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        nn.init.normal_(self.wte.weight, std=1.0)  # input weights: fan-in is finite
        nn.init.normal_(self.wpe.weight, std=1.0)
        for block in self.blocks:
            attn = block.attn
            for lin in (attn.c_k, attn.c_v, attn.c_proj):
                nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)  # hidden: var 1/fan_in
            nn.init.zeros_(attn.c_q.weight)  # zero query: uniform attention at init
            block.ln_1.reset_parameters()
            block.ln_2.reset_parameters()
            block.moe.reset_parameters()
        self.ln_f.reset_parameters()
        self.lm_head.reset_parameters()

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The logits; with ``targets`` (``loss=model forward_targets=true output=0``) ``(logits, loss)``: the
        next-token cross-entropy plus ``balance_loss`` times the layers' load-balancing terms and ``z_loss`` times
        their router z-losses."""
        B, T = idx.shape
        if T > self.context:
            raise CoordCheckError(f"sequence length {T} exceeds the model context {self.context}: raise model.context")
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten())
        for block in self.blocks if self.balance_loss or self.z_loss else ():
            loss = loss + self.balance_loss * block.moe.balance + self.z_loss * block.moe.z
        return logits, loss


def moe(width: int, **kwargs) -> MoETransformer:
    """Build the built-in muP mixture-of-experts transformer at ``width``; see :class:`MoETransformer` for kwargs."""
    return MoETransformer(width, **kwargs)


moe.__signature__ = inspect.signature(MoETransformer)  # its keywords, for what reads them (setup.experts)
