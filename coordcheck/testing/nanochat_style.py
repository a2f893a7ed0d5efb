"""nanochat style: a GPT written the way karpathy/nanochat writes its model, with its own fused Muon + AdamW optimizer.

A model family for the mutation atlas of the muP diagnosis: muP-correct by default, nanochat's own choices one
keyword away (``as_written=True``). What it follows, read from karpathy/nanochat (commit 92d63d4):

* ``nanochat/gpt.py``: token embedding ``wte`` (``nn.Embedding``, normal std 0.8) untied from ``lm_head``
  (``Linear``, no bias, normal std 0.001); ``norm`` = parameter-free ``F.rms_norm``, applied after the embedding,
  before each branch and before ``lm_head``; rotary embeddings (base 100000, halves rotated, no positional embedding);
  QK norm after rotary, then q and k times 1.2; causal ``F.scaled_dot_product_attention`` at its default
  1/sqrt(head_dim) scale (nanochat's SDPA fallback; its short window, ceil(T/4/128)*128, covers the whole context
  below 128 tokens, so full context is the same thing here); a ReLU² MLP (``c_fc`` 4x, ``c_proj``); a ``Linear``
  that casts its weight to the input's dtype; per-layer scalars ``resid_lambdas`` (init 1.15 → 1.05) and
  ``x0_lambdas`` (0.20 → 0.05) blending the normed embedding ``x0`` back in before each block; the smear (the previous
  token's embedding mixed in through ``smear_gate``, Linear(24, 1), and ``smear_lambda``, init 0); the backout
  (``backout_lambda`` 0.2 times the residual cached after layer n_layer // 2, subtracted before the final norm); value
  embeddings (ResFormer) on alternating layers, the last always (``has_ve``), each gated per head by
  ``3 * sigmoid(ve_gate(x[..., :12]))``, ``ve_gate`` Linear(12, n_kv_head) init uniform(0, 0.02); the inits of
  ``init_weights`` (c_q, c_k, c_v uniform ±sqrt(3)·n_embd^-1/2, c_fc 0.4 times that, both c_proj zero, value
  embeddings like c_v); logits softcapped ``15 * tanh(logits / 15)``; ``forward(idx, targets=None)`` returns the
  logits without targets and the bare scalar mean cross-entropy with them (``ignore_index=-1``).
* ``scripts/base_train.py``: a fixed head dimension, heads growing with width (``n_head = model_dim // head_dim``,
  ``n_kv_head = n_head``); its default learning rates (matrix 0.02, embedding 0.3, unembedding 0.008, scalar 0.5).
* ``nanochat/gpt.py::setup_optimizer`` and ``nanochat/optim.py::MuonAdamW``: one optimizer whose groups carry
  ``kind='adamw'`` or ``kind='muon'``; AdamW for ``lm_head`` (betas (0.8, 0.96), wd 0.01), ``wte`` ((0.8, 0.995),
  0.001), the value embeddings (half the embedding lr, wd 0.01), ``resid_lambdas`` (scalar lr × 0.01, wd 0.05),
  ``x0_lambdas`` (scalar lr, betas (0.96, 0.95)) and the smear/backout parameters (lr 0.2), all eps 1e-10; the lrs of
  ``lm_head``, ``wte`` and the value embeddings times ``(model_dim / 768)^-0.5``; Muon for every parameter of the
  blocks (``ve_gate`` included), one group per shape (momentum 0.95, ns_steps 5, beta2 0.9), its lr times
  ``max(1, rows / cols)^0.5`` of the ``(out, in)`` weight; Muon's step: Nesterov momentum, row equilibration, a
  quintic Newton–Schulz iteration with the Polar Express coefficients (Amsel et al. 2025), the Frobenius norm set to
  sqrt(min(m, n)) (Muon+), NorMuon's per-row/column variance normalisation, cautious weight decay (its lr the
  shape-adjusted one).

Written here, not copied: the orthogonalisation runs in float32 (nanochat casts to bf16), one process only (no
sharding), no KV cache, no torch.compile. muP by default (each knob a builder keyword):

* ``output_mult=True``: logits times ``base_width / width`` before the softcap (muP's readout multiplier; nanochat has
  none);
* ``lr_scaling="mup"``: the AdamW lrs of ``wte``, the value embeddings and ``lm_head`` constant in width at
  nanochat's value for ``base_width`` (``(base_width / 768)^-0.5``); ``"nanochat"``: ``(width / 768)^-0.5``, as
  nanochat scales them. The scalars' lrs and Muon's lr are constant either way, Muon's shape factor kept;
* ``ve_init="mup"``: value embeddings uniform with std ``base_width^-1/2`` at every width (an embedding's fan-in is
  the vocabulary: its init is constant in width); ``"nanochat"``: std ``n_embd^-1/2``, as nanochat inits them (like
  c_v);
* ``muon_renorm=False``: Muon's update left as orthogonalised; ``True``: nanochat's Muon+ step, the Frobenius norm set
  to sqrt(min(m, n)). That norm is a semi-orthogonal matrix's only when the update has full rank; a gradient of fewer
  independent directions than min(m, n) (a batch of B·T tokens, fixed, against a width that grows) has its few
  singular values blown up by sqrt(min(m, n) / rank): the MLP's c_proj output after two updates grows like
  width^+0.4 over widths 64-512 at 128 tokens (+0.01 to +0.07 without it);
* ``wte_std=0.8``, ``lm_head_std=0.001``: nanochat's, constant in width (muP's input and readout inits beside the
  multiplier);
* ``as_written=True``: nanochat's own choices (:data:`AS_WRITTEN`: ``output_mult=False, lr_scaling="nanochat",
  ve_init="nanochat", muon_renorm=True``); a keyword given beside it wins.

Run with ``parametrization="none", optimizer=optimizer, data="tokens"`` and ``base_width=64`` (the muP default passes
there at lr 0.01, 6 steps, 2 seeds, widths 64-256 and 128-512: ``tests/test_nanochat_style.py``)::

    from coordcheck import coord_check
    from coordcheck.testing.nanochat_style import build, optimizer
    coord_check(build, [64, 128, 256], parametrization="none", optimizer=optimizer, base_width=64, data="tokens",
                lr=0.01, steps=6, seeds=2)

``optimizer(model, lr)``: ``lr`` is Muon's matrix lr; the other lrs keep nanochat's ratios to it (base_train.py's
defaults over its matrix lr 0.02: embedding 15 × lr, unembedding 0.4 × lr, scalar 25 × lr; the smear's fixed 0.2,
10 × lr), so ``lr=0.02`` is nanochat's setting.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["GPTConfig", "GPT", "MuonAdamW", "orthogonalize", "build", "optimizer", "AS_WRITTEN", "LR_RATIOS"]

LrScaling = Literal["mup", "nanochat"]
VeInit = Literal["mup", "nanochat"]
AS_WRITTEN = {"output_mult": False, "lr_scaling": "nanochat", "ve_init": "nanochat", "muon_renorm": True}
# base_train.py's default lrs over its matrix (Muon) lr 0.02; smear: gpt.py's fixed 0.2
LR_RATIOS = {"matrix_lr": 1.0, "embedding_lr": 0.3 / 0.02, "unembedding_lr": 0.008 / 0.02, "scalar_lr": 0.5 / 0.02,
             "smear_lr": 0.2 / 0.02}
# Polar Express (Amsel, Persson, Musco, Gower 2025, arXiv:2505.16932): (a, b, c) of X <- aX + (bA + cA²)X, A = XXᵀ
POLAR_EXPRESS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)


@dataclass
class GPTConfig:
    sequence_len: int = 64
    vocab_size: int = 256
    n_layer: int = 2
    n_head: int = 4  # query heads: n_embd // head_dim in build()
    n_kv_head: int = 4
    n_embd: int = 128
    # muP knobs (module docstring)
    base_width: int = 64
    output_mult: bool = True
    lr_scaling: LrScaling = "mup"
    ve_init: VeInit = "mup"
    muon_renorm: bool = False
    wte_std: float = 0.8
    lm_head_std: float = 0.001

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def norm(x: Tensor) -> Tensor:
    return F.rms_norm(x, (x.size(-1),))  # no learnable gain


class Linear(nn.Linear):
    """nn.Linear whose weight is cast to the input's dtype (fp32 master weights, matmuls in the activations' dtype)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight.to(dtype=x.dtype))


def has_ve(layer: int, n_layer: int) -> bool:
    """Value embedding on alternating layers, the last one always."""
    return layer % 2 == (n_layer - 1) % 2


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding of (B, T, H, D) by (1, T, 1, D/2) angles: the two halves of D rotated as pairs."""
    d = x.size(3) // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=3)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer: int):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = config.n_head, config.n_kv_head, config.head_dim
        assert config.n_embd % config.n_head == 0 and config.n_head % config.n_kv_head == 0
        self.c_q = Linear(config.n_embd, self.n_head * self.head_dim, bias=False)
        self.c_k = Linear(config.n_embd, self.n_kv_head * self.head_dim, bias=False)
        self.c_v = Linear(config.n_embd, self.n_kv_head * self.head_dim, bias=False)
        self.c_proj = Linear(config.n_embd, config.n_embd, bias=False)
        self.ve_channels = 12  # the gate reads the first 12 channels of x
        self.ve_gate = Linear(self.ve_channels, self.n_kv_head, bias=False) if has_ve(layer, config.n_layer) else None

    def forward(self, x: Tensor, ve: Tensor | None, cos_sin: tuple[Tensor, Tensor]) -> Tensor:
        B, T, C = x.size()
        q = self.c_q(x).view(B, T, self.n_head, self.head_dim)  # (B, T, nh, hd)
        k = self.c_k(x).view(B, T, self.n_kv_head, self.head_dim)  # (B, T, nkv, hd)
        v = self.c_v(x).view(B, T, self.n_kv_head, self.head_dim)
        if ve is not None:  # value residual: v + gate * ve, gate (B, T, nkv) in (0, 3)
            gate = 3 * torch.sigmoid(self.ve_gate(x[..., :self.ve_channels]))
            v = v + gate.unsqueeze(-1) * ve.view(B, T, self.n_kv_head, self.head_dim)
        q, k = rotate(q, *cos_sin), rotate(k, *cos_sin)
        q, k = norm(q) * 1.2, norm(k) * 1.2  # QK norm, then sharper attention
        y = F.scaled_dot_product_attention(  # (B, nh, T, hd), scale 1/sqrt(hd): hd is fixed
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
            enable_gqa=self.n_kv_head != self.n_head)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.c_proj = Linear(4 * config.n_embd, config.n_embd, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(F.relu(self.c_fc(x)).square())  # ReLU²


class Block(nn.Module):
    def __init__(self, config: GPTConfig, layer: int):
        super().__init__()
        self.attn = CausalSelfAttention(config, layer)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, ve: Tensor | None, cos_sin: tuple[Tensor, Tensor]) -> Tensor:
        x = x + self.attn(norm(x), ve, cos_sin)
        return x + self.mlp(norm(x))


class GPT(nn.Module):
    """idx (B, T) -> logits (B, T, vocab_size); with targets (B, T), the scalar mean cross-entropy instead.

    Built with placeholder values: call :meth:`init_weights` (``build`` does), as nanochat does after building on the
    meta device."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(config.vocab_size, config.n_embd),
            "h": nn.ModuleList([Block(config, i) for i in range(config.n_layer)]),
        })
        self.lm_head = Linear(config.n_embd, config.vocab_size, bias=False)
        self.resid_lambdas = nn.Parameter(torch.ones(config.n_layer))  # scales the residual stream per layer
        self.x0_lambdas = nn.Parameter(torch.zeros(config.n_layer))  # blends x0 back in per layer
        self.smear_gate = Linear(24, 1, bias=False)  # reads the first 24 channels
        self.smear_lambda = nn.Parameter(torch.zeros(1))
        self.backout_lambda = nn.Parameter(0.2 * torch.ones(1))
        kv_dim = config.n_kv_head * config.head_dim
        self.value_embeds = nn.ModuleDict({str(i): nn.Embedding(config.vocab_size, kv_dim)
                                           for i in range(config.n_layer) if has_ve(i, config.n_layer)})
        self.rotary_seq_len = config.sequence_len * 10
        cos, sin = self._rotary(self.rotary_seq_len, config.head_dim)
        self.register_buffer("cos", cos, persistent=False)  # (1, T, 1, hd/2)
        self.register_buffer("sin", sin, persistent=False)
        # muP's readout multiplier (1 = nanochat: none)
        self.logit_mult = config.base_width / config.n_embd if config.output_mult else 1.0

    @torch.no_grad()
    def init_weights(self) -> None:
        """wte normal(wte_std); lm_head normal(lm_head_std); c_q, c_k, c_v uniform with std n_embd^-1/2, c_fc 0.4 of
        it; both c_proj zero; value embeddings uniform with std n_embd^-1/2 (``ve_init="nanochat"``) or
        base_width^-1/2 (``"mup"``); gates uniform(0, 0.02); the per-layer scalars as nanochat sets them."""
        cfg = self.config
        nn.init.normal_(self.transformer.wte.weight, mean=0.0, std=cfg.wte_std)
        nn.init.normal_(self.lm_head.weight, mean=0.0, std=cfg.lm_head_std)
        s = 3**0.5 * cfg.n_embd**-0.5  # uniform(-s, s) has std n_embd^-1/2
        for block in self.transformer.h:
            for w in (block.attn.c_q.weight, block.attn.c_k.weight, block.attn.c_v.weight):
                nn.init.uniform_(w, -s, s)
            nn.init.zeros_(block.attn.c_proj.weight)
            nn.init.uniform_(block.mlp.c_fc.weight, -0.4 * s, 0.4 * s)
            nn.init.zeros_(block.mlp.c_proj.weight)
            if block.attn.ve_gate is not None:
                nn.init.uniform_(block.attn.ve_gate.weight, 0.0, 0.02)
        n = cfg.n_layer
        for i in range(n):
            self.resid_lambdas[i] = 1.15 - 0.10 * i / max(n - 1, 1)
            self.x0_lambdas[i] = 0.20 - 0.15 * i / max(n - 1, 1)
        nn.init.zeros_(self.smear_lambda)
        nn.init.constant_(self.backout_lambda, 0.2)
        nn.init.uniform_(self.smear_gate.weight, 0.0, 0.02)
        s_ve = s if cfg.ve_init == "nanochat" else 3**0.5 * cfg.base_width**-0.5
        for ve in self.value_embeds.values():
            nn.init.uniform_(ve.weight, -s_ve, s_ve)
        self.cos, self.sin = self._rotary(self.rotary_seq_len, cfg.head_dim)

    def _rotary(self, seq_len: int, head_dim: int, base: float = 100000.0) -> tuple[Tensor, Tensor]:
        device = self.transformer.wte.weight.device
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
        freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), inv_freq)  # (T, hd/2)
        return freqs.cos()[None, :, None, :], freqs.sin()[None, :, None, :]

    def setup_optimizer(self, unembedding_lr: float = 0.008, embedding_lr: float = 0.3, matrix_lr: float = 0.02,
                        weight_decay: float = 0.0, scalar_lr: float = 0.5, smear_lr: float = 0.2) -> MuonAdamW:
        """nanochat's groups (module docstring); the defaults are base_train.py's. ``smear_lr`` is nanochat's fixed
        0.2 made a keyword. ``lr_scaling`` picks the width in ``(d / 768)^-0.5``: this width (nanochat) or
        ``base_width`` (muP: constant in width)."""
        cfg = self.config
        d = cfg.n_embd if cfg.lr_scaling == "nanochat" else cfg.base_width
        dmodel_lr_scale = (d / 768) ** -0.5  # tuned at 768
        matrix_params = list(self.transformer.h.parameters())
        adamw = dict(kind="adamw", eps=1e-10)
        groups = [
            dict(adamw, params=list(self.lm_head.parameters()), lr=unembedding_lr * dmodel_lr_scale,
                 betas=(0.8, 0.96), weight_decay=0.01),
            dict(adamw, params=list(self.transformer.wte.parameters()), lr=embedding_lr * dmodel_lr_scale,
                 betas=(0.8, 0.995), weight_decay=0.001),
            dict(adamw, params=list(self.value_embeds.parameters()), lr=embedding_lr * dmodel_lr_scale * 0.5,
                 betas=(0.8, 0.995), weight_decay=0.01),
            dict(adamw, params=[self.resid_lambdas], lr=scalar_lr * 0.01, betas=(0.8, 0.95), weight_decay=0.05),
            dict(adamw, params=[self.x0_lambdas], lr=scalar_lr, betas=(0.96, 0.95), weight_decay=0.0),
            dict(adamw, params=[self.smear_gate.weight, self.smear_lambda, self.backout_lambda], lr=smear_lr,
                 betas=(0.8, 0.95), weight_decay=0.0),
        ]
        for shape in sorted({p.shape for p in matrix_params}):  # one Muon group per shape: stacked in its step
            groups.append(dict(kind="muon", params=[p for p in matrix_params if p.shape == shape], lr=matrix_lr,
                               momentum=0.95, ns_steps=5, beta2=0.9, weight_decay=weight_decay,
                               renorm=cfg.muon_renorm))
        groups = [g for g in groups if g["params"]]  # no value embeddings at n_layer=0
        assert sum(len(g["params"]) for g in groups) == len(list(self.parameters()))
        opt = MuonAdamW(groups)
        for g in opt.param_groups:
            g["initial_lr"] = g["lr"]
        return opt

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> Tensor:
        B, T = idx.size()
        assert 1 < T <= self.cos.size(1), f"sequence length {T} outside (1, {self.cos.size(1)}]"
        cos_sin = self.cos[:, :T], self.sin[:, :T]
        x = norm(self.transformer.wte(idx))  # (B, T, C)
        # smear: the previous token's embedding, gated, into each position from the second on
        gate = self.smear_lambda * torch.sigmoid(self.smear_gate(x[:, 1:, :24]))  # (B, T-1, 1)
        x = torch.cat([x[:, :1], x[:, 1:] + gate * x[:, :-1]], dim=1)
        x0, backout = x, None
        for i, block in enumerate(self.transformer.h):
            x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
            ve = self.value_embeds[str(i)](idx) if str(i) in self.value_embeds else None  # (B, T, kv_dim)
            x = block(x, ve, cos_sin)
            if i == self.config.n_layer // 2:
                backout = x
        if backout is not None:
            x = x - self.backout_lambda * backout  # low-level features out before the readout
        logits = self.lm_head(norm(x)).float() * self.logit_mult  # (B, T, vocab_size)
        logits = 15 * torch.tanh(logits / 15)  # softcap
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)


@torch.no_grad()
def orthogonalize(g: Tensor, steps: int = 5) -> Tensor:
    """(..., m, n) -> the same shape with singular values near 1 (roughly uniform in (0.7, 1.2)): a quintic
    Newton–Schulz iteration with the Polar Express coefficients, in float32, on the short side's Gram matrix."""
    x = g.float()
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT  # (..., n, m): the Gram matrix below is the smaller one
    x = x / (x.norm(dim=(-2, -1), keepdim=True) * 1.01 + 1e-6)  # spectral norm <= 1
    for a, b, c in POLAR_EXPRESS[:steps]:
        gram = x @ x.mT  # (..., short, short)
        x = a * x + (b * gram + c * gram @ gram) @ x
    return (x.mT if tall else x).to(g.dtype)


class MuonAdamW(torch.optim.Optimizer):
    """One optimizer, two kinds of group (``group["kind"]``): ``"adamw"`` (``lr``, ``betas``, ``eps``,
    ``weight_decay``) and ``"muon"`` (``lr``, ``momentum``, ``ns_steps``, ``beta2``, ``weight_decay``; its parameters
    all of one 2-D shape, stepped as one stack).

    Muon's step of a group of K (m, n) matrices: Nesterov momentum; rows rescaled to the mean row norm; orthogonalised
    (:func:`orthogonalize`); Frobenius norm set to sqrt(min(m, n)); NorMuon: each row (m >= n) or column divided by
    the root of its running mean square (beta2), the whole then rescaled to its norm before; cautious weight decay
    (only where update and weight agree in sign); the lr times ``max(1, m / n)^0.5``."""

    def __init__(self, param_groups: list[dict]):
        super().__init__(param_groups, defaults={})
        for g in self.param_groups:
            if g.get("kind") not in ("adamw", "muon"):
                raise ValueError(f"MuonAdamW: group kind must be 'adamw' or 'muon', got {g.get('kind')!r}")
            if g["kind"] == "muon" and len({p.shape for p in g["params"]}) != 1:
                raise ValueError("MuonAdamW: a Muon group's parameters must share one shape")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            (self._adamw if group["kind"] == "adamw" else self._muon)(group)
        return loss

    def _adamw(self, group: dict) -> None:
        beta1, beta2 = group["betas"]
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
            state["step"] += 1
            t, m, v, g = state["step"], state["exp_avg"], state["exp_avg_sq"], p.grad.float()
            w = p.float().mul_(1 - lr * wd)  # decoupled weight decay first
            m.lerp_(g, 1 - beta1)
            v.lerp_(g.square(), 1 - beta2)
            denom = (v / (1 - beta2**t)).sqrt_().add_(eps)
            w.addcdiv_(m, denom, value=-lr / (1 - beta1**t))
            p.copy_(w)

    def _muon(self, group: dict) -> None:
        params = group["params"]
        if all(p.grad is None for p in params):
            return
        g = torch.stack([p.grad if p.grad is not None else torch.zeros_like(p) for p in params]).float()  # (K, m, n)
        w = torch.stack(params).float()
        m, n = g.shape[-2:]
        red = -1 if m >= n else -2  # NorMuon's statistics per row of a tall/square matrix, per column of a wide one
        state = self.state[params[0]]  # the group's state, stacked, on its first parameter
        if not state:
            state["momentum_buffer"] = torch.zeros_like(g)
            state["second_momentum_buffer"] = torch.zeros((len(params), m, 1) if red == -1 else (len(params), 1, n))
        buf, buf2 = state["momentum_buffer"], state["second_momentum_buffer"]
        buf.lerp_(g, 1 - group["momentum"])
        u = g.lerp_(buf, group["momentum"])  # Nesterov
        rows = u.norm(dim=-1, keepdim=True).clamp_min(1e-6)  # (K, m, 1)
        u = u * (u.norm(dim=(-2, -1), keepdim=True) / m**0.5 / rows)  # every row at the mean row norm
        u = orthogonalize(u, group["ns_steps"])
        if group.get("renorm", True):  # Muon+: Frobenius norm sqrt(min(m, n)), that of a semi-orthogonal matrix
            u = u * (min(m, n) ** 0.5 / u.norm(dim=(-2, -1), keepdim=True).clamp_min(1e-6))
        ms = u.square().mean(dim=red, keepdim=True)  # (K, m, 1) or (K, 1, n)
        buf2.lerp_(ms, 1 - group["beta2"])
        scale = buf2.clamp_min(1e-10).rsqrt()
        before = (ms * u.size(red)).sum(dim=(-2, -1), keepdim=True).sqrt()
        after = (ms * u.size(red) * scale.square()).sum(dim=(-2, -1), keepdim=True).sqrt()
        u = u * scale * (before / after.clamp_min(1e-10))
        lr = group["lr"] * max(1.0, m / n) ** 0.5  # shape factor
        cautious = (u * w >= 0).float()
        w.sub_(lr * u + lr * group["weight_decay"] * w * cautious)
        torch._foreach_copy_(params, list(w.to(params[0].dtype).unbind(0)))


def build(width: int, base_width: int = 64, *, as_written: bool = False, head_dim: int = 32, **kwargs) -> GPT:
    """:class:`GPT` at ``n_embd = width`` with ``width // head_dim`` heads, initialised. ``kwargs``: the knobs and
    sizes of :class:`GPTConfig`; ``as_written=True`` starts from nanochat's own knobs (:data:`AS_WRITTEN`)."""
    if width % head_dim:
        raise ValueError(f"width {width} is not a multiple of head_dim {head_dim}")
    knobs = {**AS_WRITTEN, **kwargs} if as_written else kwargs
    n_head = width // head_dim
    config = replace(GPTConfig(), n_embd=width, n_head=n_head, n_kv_head=n_head, base_width=base_width, **knobs)
    model = GPT(config)
    model.init_weights()
    return model


def optimizer(model: GPT, lr: float) -> MuonAdamW:
    """``model.setup_optimizer`` with ``lr`` as Muon's matrix lr, the others at nanochat's ratios (:data:`LR_RATIOS`):
    ``lr=0.02`` is base_train.py's setting."""
    return model.setup_optimizer(**{k: r * lr for k, r in LR_RATIOS.items()})
