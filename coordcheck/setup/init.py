"""Initialisation: the ``init`` config group, applied to the built model before its optimizer is made.

Stage: parametrize (after the parametrization, before the optimizer). Input: the parametrized model (at
the job's width), its builder, ``base_width``, the seed and the parametrization. Output: the same model, its
parameters changed in place.

* ``none`` (:func:`as_built`) — the model's own initialisation, as the builder and the parametrization left it.
* ``mup`` (:func:`mup_init`) — the hidden matrices (both dimensions grow with width, found as mup's base shapes
  find them: :func:`coordcheck.setup.parametrization.width_infshapes`) get std ``std_base * sqrt(base_fan_in /
  fan_in)``, where ``std_base`` is that parameter's std in the model the harness builds at ``base_width`` with
  the same seed (and parametrization) — what ``mup.init`` does to a constant-std sampler. Every other parameter
  is left as built, but for routers — output-like matrices inside the blocks that are not a ``MuReadout``
  (:func:`coordcheck.setup.parametrization.routers`: a mixture of experts' width → experts) — which get
  ``std_base / width_mult`` (∝ 1/fan_in: an output weight without a multiplier, Tensor Programs V Table 3). For
  libraries whose init is one std for every weight (Granite's ``initializer_range``, GPT-2's 0.02), where muP
  needs the hidden ones to shrink like fan_in^-1/2.

An init is any callable ``init(model, **context)`` whose signature names what it needs of ``build``, ``width``,
``base_width``, ``seed`` and ``parametrization`` (``coordcheck.setup.parametrization.named_keywords``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from coordcheck.core.errors import CoordCheckError
from coordcheck.setup.parametrization import Builder, Parametrization, build_model, routers, width_infshapes

__all__ = ["as_built", "mup_init", "resolve_init", "INITS"]


def as_built(model: nn.Module) -> None:
    """``init=none``: leave the model's own initialisation."""


@torch.no_grad()
def mup_init(model: nn.Module, *, build: Builder, base_width: int, seed: int, parametrization: Parametrization) -> None:
    """``init=mup``: each hidden matrix's own draw scaled (about zero) so that its std is ``std_base *
    width_mult^-1/2`` (``width_mult`` = fan_in / base fan_in, mup's); ``std_base`` is measured on the model built
    at ``base_width`` with ``seed`` (on the same device, the global RNG restored after). The draw keeps its shape
    (normal, uniform, truncated); a zero-initialised matrix stays zero. At ``width == base_width`` nothing
    changes."""
    shapes = width_infshapes(model, build, base_width, who="init=mup")
    inside = routers(model, shapes)
    hidden = [(name, p) for name, p in model.named_parameters() if shapes[name].ninf() == 2 or name in inside]
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type):
        base = dict(build_model(build, base_width, seed, parametrization, base_width).named_parameters())
    stds = torch.stack([torch.stack([base[name].detach().double().std(), p.detach().double().std()])
                        for name, p in hidden]).cpu().tolist() if hidden else []  # moved to the host once
    for (name, p), (std_base, std_now) in zip(hidden, stds):
        mult = shapes[name].width_mult()
        target = std_base / (mult if name in inside else math.sqrt(mult))  # a router: std ∝ 1/fan_in
        if std_now > 0 and math.isfinite(std_now):
            p.mul_(target / std_now)


INITS = {"none": as_built, "mup": mup_init}


def resolve_init(init: str | Callable[..., None] | None) -> Callable[..., None] | None:
    """``init=`` of the APIs: a name of :data:`coordcheck.setup.init.INITS`, a callable, or None (as built)."""
    if init is None or init == "none":
        return None
    if isinstance(init, str):
        if init not in INITS:
            raise CoordCheckError(f"unknown init {init!r}: use one of {sorted(INITS)} or a callable init(model, ...)")
        return INITS[init]
    if not callable(init):
        raise CoordCheckError(f"init must be a name ({', '.join(sorted(INITS))}), a callable or None, got {init!r}")
    return init
