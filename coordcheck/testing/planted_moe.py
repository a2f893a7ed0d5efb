"""Known causes on a mixture of experts: the built-in MoE (``model=moe``) with one planted fault each.

The built-in :class:`~coordcheck.setup.moe.MoETransformer` is muP-correct under ``parametrization=mup`` (a
``MuReadout`` router, 3-D expert stacks as hidden matrices). :func:`planted_moe_optimizer` gives it the learning
rates MuAdamW would (:func:`coordcheck.setup.optim.mup_param_groups`, from the same base shapes), except where a
fault is planted — the mistakes people make when they write the groups by hand for a MoE:

* ``router_lr="hidden"`` — the routers put in the hidden group (``p.dim() >= 2`` taken as "hidden"): their learning
  rate shrinks like ``base / width`` on top of the MuReadout's ``1 / width`` multiplier, so router updates vanish.
* ``unscaled_lr=("blocks.1.moe.experts.up", "blocks.1.moe.experts.down")`` — one layer's experts left out of the
  width-scaled group (a name list that missed the 3-D expert weights): they keep the full ``lr``.
* the model's ``router="linear"`` (a plain ``nn.Linear`` at fan_in^-1/2: the router built like a hidden layer, with
  no output multiplier) — not a fault of the optimizer: under ``parametrization=mup`` a finding naming the routers.

:data:`FAULTS` names each known answer's keywords and what it must name (the tests and
``experiments/moe_known_answers.py`` use it), with :func:`builder`'s model under ``parametrization="mup"``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import nn

from coordcheck.core.errors import CoordCheckError
from coordcheck.setup.moe import moe
from coordcheck.setup.optim import mup_param_groups
from coordcheck.setup.parametrization import width_infshapes

__all__ = ["planted_moe_optimizer", "FAULTS", "builder"]


def planted_moe_optimizer(
    model: nn.Module, lr: float, *, build: Callable[..., nn.Module], base_width: int,
    router_lr: Literal["mup", "hidden"] = "mup", unscaled_lr: Sequence[str] = (), weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    """AdamW with MuAdamW's groups for ``model``, but the planted faults (module docstring). ``unscaled_lr``: parameter
    names (or a prefix of them, a module's name) that keep the full ``lr``."""
    if router_lr not in ("mup", "hidden"):
        raise CoordCheckError(f"router_lr must be mup or hidden, got {router_lr!r}")
    names = {id(p): n for n, p in model.named_parameters()}
    shapes = width_infshapes(model, build, base_width, who="planted_moe_optimizer")
    groups = mup_param_groups(model, shapes, float(lr), weight_decay, "adamw")
    full = {"params": [], "lr": float(lr), "weight_decay": weight_decay}
    hidden_mult = {"params": [], "lr": float(lr), "weight_decay": weight_decay}
    hit = set()
    for g in groups:
        keep = []
        for p in g["params"]:
            name = names[id(p)]
            if any(name == u or name.startswith(u + ".") for u in unscaled_lr):
                full["params"].append(p)
                hit.add(name)
            elif router_lr == "hidden" and ".router." in name and shapes[name].ninf() == 1 and p.dim() == 2:
                hidden_mult["params"].append(p)  # the planted "p.dim() >= 2 is hidden" group: lr / width_mult
                hidden_mult["lr"] = float(lr) / shapes[name].width_mult()
                hit.add(name)
            else:
                keep.append(p)
        g["params"] = keep
    missing = [u for u in unscaled_lr if not any(n == u or n.startswith(u + ".") for n in hit)]
    if missing:
        raise CoordCheckError(f"unscaled_lr: {missing} match no parameter of the model")
    groups = [g for g in [*groups, full, hidden_mult] if g["params"]]
    return torch.optim.AdamW(groups, lr=float(lr), weight_decay=weight_decay)


# name -> (model keywords, optimizer keywords, (the first cause's kind, every module the causes must name: exactly the
# planted ones)); "correct" must pass.
FAULTS: dict[str, tuple[dict, dict, tuple[str, list[str]]]] = {
    "correct": ({}, {}, ("", [])),
    "router lr scaled like a hidden matrix": (
        {}, {"router_lr": "hidden"}, ("lr", ["blocks.0.moe.router.gate", "blocks.1.moe.router.gate"])),
    "one layer's experts at the full lr": (
        {}, {"unscaled_lr": ("blocks.1.moe.experts",)}, ("lr", ["blocks.1.moe.experts"])),
    "router built like a hidden layer": (
        {"router": "linear"}, {}, ("structure", ["blocks.0.moe.router.gate", "blocks.1.moe.router.gate"])),
}


def builder(**model_kw) -> Callable[..., nn.Module]:
    """The built-in MoE with ``model_kw`` set (a builder ``build(width)``)."""
    return functools.partial(moe, **model_kw)
