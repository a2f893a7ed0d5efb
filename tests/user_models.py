"""Models as users write them (importable by the CLI in tests, and copied as a user's ``my_pkg`` by pytester tests).

``TokenLM``: a small residual LM made muP with the mup package (a ``MuReadout``). ``PlainMLP``: an MLP as people
write it before they make it muP — its readout ``head`` is a plain ``nn.Linear``.
"""

from __future__ import annotations

import torch
from mup import MuReadout
from torch import nn


class TokenLM(nn.Module):
    def __init__(self, width: int, vocab_size: int = 128, n_layer: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.pos = nn.Embedding(16, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.GELU(),
                                                  nn.Linear(2 * width, width)) for _ in range(n_layer))
        self.norm = nn.LayerNorm(width)
        self.head = MuReadout(width, vocab_size)

    def forward(self, idx):
        x = self.embed(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = x + block(x)
        return self.head(self.norm(x))


class PlainMLP(nn.Module):
    def __init__(self, width: int, in_dim: int = 32, n_classes: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, width)
        self.fc2 = nn.Linear(width, width)
        self.head = nn.Linear(width, n_classes)

    def forward(self, x):
        return self.head(self.fc2(self.fc1(x).relu()).relu())


class OlmoStyleGPT(nn.Module):
    """A decoder with muP written by hand the OLMo / nanoGPT-mup way: ``blocks.N.{attn_in,attn_out,fc1,fc2}``, RMSNorm,
    SDPA at 1/d_head, the output multiplier ``base_width / width`` on the logits, hidden init std
    ``0.02 * sqrt(base_width / width)``; its learning-rate groups come from :func:`olmo_optimizer`. Faults, one
    keyword each: ``unscaled_lr`` (parameter names kept at the full lr), ``embed_hidden_lr`` (the embedding given the
    hidden lr), ``constant_init`` (module names initialised at 0.02 at every width), ``output_mult=False``."""

    def __init__(self, width: int, base_width: int = 64, vocab_size: int = 256, n_layer: int = 2, n_head: int = 4,
                 unscaled_lr: tuple = (), embed_hidden_lr: bool = False, constant_init: tuple = (),
                 output_mult: bool = True):
        super().__init__()
        self.width, self.base_width, self.n_head = width, base_width, n_head
        self.unscaled_lr, self.embed_hidden_lr = tuple(unscaled_lr), embed_hidden_lr
        self.embed = nn.Embedding(vocab_size, width)
        self.blocks = nn.ModuleList()
        for _ in range(n_layer):
            block = nn.Module()
            block.attn_norm, block.mlp_norm = nn.RMSNorm(width), nn.RMSNorm(width)
            block.attn_in = nn.Linear(width, 3 * width, bias=False)
            block.attn_out = nn.Linear(width, width, bias=False)
            block.fc1 = nn.Linear(width, 4 * width, bias=False)
            block.fc2 = nn.Linear(4 * width, width, bias=False)
            self.blocks.append(block)
        self.norm = nn.RMSNorm(width)
        self.lm_head = nn.Linear(width, vocab_size, bias=False)
        self.output_mult = base_width / width if output_mult else 1.0
        hidden_std = 0.02 * (base_width / width) ** 0.5
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                std = 0.02 if module is self.lm_head or name in constant_init else hidden_std
                nn.init.normal_(module.weight, std=std)
        nn.init.normal_(self.embed.weight, std=1.0)

    def forward(self, idx):
        x = self.embed(idx)
        b, t, d = x.shape
        hd = d // self.n_head
        for blk in self.blocks:
            q, k, v = blk.attn_in(blk.attn_norm(x)).split(d, dim=-1)
            q, k, v = (z.view(b, t, self.n_head, hd).transpose(1, 2) for z in (q, k, v))
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / hd)
            x = x + blk.attn_out(y.transpose(1, 2).reshape(b, t, d))
            x = x + blk.fc2(torch.nn.functional.gelu(blk.fc1(blk.mlp_norm(x))))
        return self.lm_head(self.norm(x)) * self.output_mult


def olmo_optimizer(model: OlmoStyleGPT, lr: float) -> torch.optim.AdamW:
    """AdamW with muP's groups: 2-D weights inside the blocks at ``lr * base_width / width``, the rest at ``lr``."""
    def hidden(name: str, p) -> bool:
        return ((p.ndim == 2 and name.startswith("blocks.") and name not in model.unscaled_lr)
                or (model.embed_hidden_lr and name == "embed.weight"))

    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if hidden(n, p)], "lr": lr * model.base_width / model.width},
              {"params": [p for n, p in named if not hidden(n, p)], "lr": lr}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)


class NanochatStyleGPT(nn.Module):
    """A decoder written the way nanochat writes its GPT: ``forward(idx, targets=None)`` returns the logits without
    targets and the bare scalar loss with them; parameter-free ``F.rms_norm``, ReLU² MLP, untied ``lm_head`` (a plain
    ``nn.Linear``). muP by hand: SDPA at 1/d_head, the output multiplier ``base_width / width`` on the logits, hidden
    init std ``∝ width^-1/2``; its learning-rate groups come from :func:`nanochat_optimizer`."""

    def __init__(self, width: int, base_width: int = 32, vocab_size: int = 256, n_layer: int = 2, n_head: int = 4):
        super().__init__()
        self.width, self.base_width, self.n_head = width, base_width, n_head
        self.wte = nn.Embedding(vocab_size, width)
        self.h = nn.ModuleList()
        for _ in range(n_layer):
            block = nn.Module()
            block.c_q, block.c_k, block.c_v, block.c_proj = (nn.Linear(width, width, bias=False) for _ in range(4))
            block.c_fc = nn.Linear(width, 4 * width, bias=False)
            block.mlp_proj = nn.Linear(4 * width, width, bias=False)
            self.h.append(block)
        self.lm_head = nn.Linear(width, vocab_size, bias=False)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02 if module is self.lm_head else module.in_features ** -0.5)
        nn.init.normal_(self.wte.weight, std=1.0)

    def forward(self, idx, targets=None):
        f = torch.nn.functional
        x = f.rms_norm(self.wte(idx), (self.width,))
        b, t, d = x.shape
        for blk in self.h:
            y = f.rms_norm(x, (d,))
            q, k, v = (m(y).view(b, t, self.n_head, -1).transpose(1, 2) for m in (blk.c_q, blk.c_k, blk.c_v))
            y = f.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.n_head / d)
            x = x + blk.c_proj(y.transpose(1, 2).reshape(b, t, d))
            x = x + blk.mlp_proj(f.relu(blk.c_fc(f.rms_norm(x, (d,)))).square())
        logits = self.lm_head(f.rms_norm(x, (d,))) * (self.base_width / self.width)
        if targets is None:
            return logits
        return f.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1), ignore_index=-1)


def nanochat_optimizer(model: NanochatStyleGPT, lr: float) -> torch.optim.AdamW:
    """AdamW with muP's groups: the blocks' matrices at ``lr * base_width / width``, embedding and readout at ``lr``."""
    named = list(model.named_parameters())
    hidden = [p for n, p in named if n.startswith("h.")]
    rest = [p for n, p in named if not n.startswith("h.")]
    return torch.optim.AdamW([{"params": hidden, "lr": lr * model.base_width / model.width}, {"params": rest}], lr=lr,
                             betas=(0.9, 0.95), weight_decay=0.0)
