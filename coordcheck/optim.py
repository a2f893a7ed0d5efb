"""Optimizer factories: ``factory(model, lr) -> torch.optim.Optimizer``.

Stage: parametrize (the optimizer half). Input: the parametrized model and the base
learning rate. Output: an optimizer. The built-in factories pick the mup variant
(MuAdam / MuAdamW / MuSGD, which scale per-group learning rates by the width multiplier)
when ``mu=True`` — the optimizer configs set it from ``parametrization.mu_optimizer`` — and
the plain torch optimizer otherwise. Any callable with the signature
``factory(model, lr)`` can replace them (``optimizer=factory optimizer._target_=pkg.make``),
for models that implement muP by hand.
"""

from __future__ import annotations

from collections.abc import Sequence

import mup
import torch
from torch import nn

__all__ = ["adam", "adamw", "sgd", "OPTIMIZERS"]


def _float_lr(lr: float) -> float:
    # mup divides a tensor-valued lr in place and shares it between groups: pass a float.
    return float(lr)


def adam(
    model: nn.Module, lr: float, *, mu: bool = False, betas: Sequence[float] = (0.9, 0.999),
    eps: float = 1e-8, weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    cls = mup.MuAdam if mu else torch.optim.Adam
    return cls(model.parameters(), lr=_float_lr(lr), betas=tuple(betas), eps=eps, weight_decay=weight_decay)


def adamw(
    model: nn.Module, lr: float, *, mu: bool = False, betas: Sequence[float] = (0.9, 0.999),
    eps: float = 1e-8, weight_decay: float = 0.01,
) -> torch.optim.Optimizer:
    cls = mup.MuAdamW if mu else torch.optim.AdamW
    return cls(model.parameters(), lr=_float_lr(lr), betas=tuple(betas), eps=eps, weight_decay=weight_decay)


def sgd(
    model: nn.Module, lr: float, *, mu: bool = False, momentum: float = 0.0, weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    cls = mup.MuSGD if mu else torch.optim.SGD
    return cls(model.parameters(), lr=_float_lr(lr), momentum=momentum, weight_decay=weight_decay)


OPTIMIZERS = {"adam": adam, "adamw": adamw, "sgd": sgd}
