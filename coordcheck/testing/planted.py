"""Known causes: a hand-written muP GPT with one planted fault each, one keyword away.

The nanoGPT-mup GPT of :mod:`coordcheck.testing.public_models` (config dataclass, ``(logits, loss)``,
fused attention, muP by hand: the output multiplier ``base / width`` on the logits and AdamW
learning rate ``lr * base / width`` on the hidden matrices) with the faults people actually
plant in such code, each a config field that names the parameters it hits:

* ``unscaled_lr=("transformer.h.1.mlp.c_proj.weight",)`` — a hidden matrix left out of the
  width-scaled learning-rate group (a name list that missed one): it keeps the full ``lr``.
* ``scaled_lr=("transformer.wte.weight",)`` — the token embedding put into the hidden group
  (``p.dim() >= 2`` taken as "hidden"): its learning rate shrinks like ``base / width``.
* ``constant_std=("transformer.h.0.mlp.c_fc.weight",)`` — one layer initialised at ``init_std``
  at every width (``nn.init.normal_(w, std=0.02)``), not ``init_std * sqrt(base / width)``
  (variance not ∝ 1/fan_in).
* ``output_mult=False`` and ``attn_scale="sqrt"`` (fields of
  :class:`~coordcheck.testing.public_models.GPTConfig`): no output multiplier; attention
  scaled ``1/sqrt(d_head)``.

With no field set, :func:`planted_builder` builds the same model, from the same random numbers,
as :func:`~coordcheck.testing.public_models.gpt_builder`, and :func:`planted_optimizers` gives it
the same groups as :func:`~coordcheck.testing.public_models.configure_optimizers`.
:data:`FAULTS` names each known answer's keywords (the tests and ``experiments/causes_known.py``
use it). Run with ``parametrization="none", optimizer=planted_optimizers, forward_targets=True,
loss="model", output=0, data="tokens"`` (:data:`RUN`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from coordcheck.testing.public_models import GPT, GPTConfig

__all__ = ["PlantedGPTConfig", "PlantedGPT", "planted_optimizers", "planted_builder", "FAULTS", "RUN"]


@dataclass
class PlantedGPTConfig(GPTConfig):
    unscaled_lr: tuple[str, ...] = ()  # hidden matrices left at the full lr (planted: not scaled by base / width)
    scaled_lr: tuple[str, ...] = ()  # other parameters given the hidden lr * base / width (planted)
    constant_std: tuple[str, ...] = ()  # Linear weights initialised at init_std at every width (planted)


class PlantedGPT(GPT):
    """:class:`~coordcheck.testing.public_models.GPT` whose ``constant_std`` weights keep ``init_std`` at any width."""

    def __init__(self, config: PlantedGPTConfig):
        super().__init__(config)
        params = dict(self.named_parameters())
        unknown = [n for n in (*config.unscaled_lr, *config.scaled_lr, *config.constant_std) if n not in params]
        assert not unknown, f"no such parameter: {unknown}"
        for name in config.constant_std:  # "std=0.02 like GPT-2": width-independent, so var * fan_in grows
            torch.nn.init.normal_(params[name], mean=0.0, std=config.init_std)


def planted_optimizers(model: PlantedGPT, lr: float) -> torch.optim.AdamW:
    """AdamW, nanoGPT groups (decay on 2-D params), muP lr: hidden matrices ``lr * base / width``, the rest ``lr``.

    Hidden matrices are the 2-D weights inside ``transformer.h``, minus ``config.unscaled_lr``, plus
    ``config.scaled_lr`` (the planted faults); betas (0.9, 0.95), weight decay 0.1 on 2-D weights.
    """
    cfg = model.config
    hidden_lr = lr / cfg.width_mult ** (2 if cfg.lr_scaled_twice else 1) if cfg.scale_hidden_lr else lr
    param_dict = {pn: p for pn, p in model.named_parameters() if p.requires_grad}

    def is_hidden(n: str, p: torch.Tensor) -> bool:
        return (p.dim() >= 2 and n.startswith("transformer.h.") and n not in cfg.unscaled_lr) or n in cfg.scaled_lr

    hidden = [p for n, p in param_dict.items() if is_hidden(n, p)]
    decay = [p for n, p in param_dict.items() if p.dim() >= 2 and not is_hidden(n, p)]
    nodecay = [p for n, p in param_dict.items() if p.dim() < 2 and not is_hidden(n, p)]
    optim_groups = [
        {"params": hidden, "weight_decay": 0.1, "lr": hidden_lr},
        {"params": decay, "weight_decay": 0.1, "lr": lr},
        {"params": nodecay, "weight_decay": 0.0, "lr": lr},
    ]
    return torch.optim.AdamW([g for g in optim_groups if g["params"]], lr=lr, betas=(0.9, 0.95))


def planted_builder(width: int, base_width: int = 64, **kwargs) -> PlantedGPT:
    """The nanoGPT-mup GPT with ``n_embd=width``; kwargs are :class:`PlantedGPTConfig` fields (the faults too)."""
    return PlantedGPT(PlantedGPTConfig(n_embd=width, mup_base_width=base_width, **kwargs))


# Each known answer of issue 17: the builder keywords that plant it (none: the correct model).
FAULTS: dict[str, dict[str, object]] = {
    "correct": {},
    "hidden_lr_one_matrix": {"unscaled_lr": ("transformer.h.1.mlp.c_proj.weight",)},
    "embedding_lr_scaled": {"scaled_lr": ("transformer.wte.weight",)},
    "no_output_multiplier": {"output_mult": False},
    "constant_init_std": {"constant_std": ("transformer.h.0.mlp.c_fc.weight",)},
    "attention_sqrt_d": {"attn_scale": "sqrt"},
}

# How the harness runs it (as a user runs a hand-written muP model): the model and its optimizer as given.
RUN: dict[str, object] = dict(parametrization="none", optimizer=planted_optimizers, forward_targets=True,
                              loss="model", output=0, base_width=64)
