"""Optimizer factories: ``factory(model, lr) -> torch.optim.Optimizer``.

Stage: parametrize (the optimizer half). Input: the parametrized model and the base
learning rate. Output: an optimizer. The built-in factories pick the mup variant
(MuAdam / MuAdamW / MuSGD, which scale per-group learning rates by the width multiplier)
when ``mu=True`` — the optimizer configs set it from ``parametrization.mu_optimizer`` — and
the plain torch optimizer otherwise. Any callable with the signature
``factory(model, lr)`` can replace them (``optimizer=factory optimizer._target_=pkg.make``),
for models that implement muP by hand. A factory whose signature also names ``build``, ``width`` or
``base_width`` gets them as keywords (``coordcheck.setup.parametrization.named_keywords``).

``mup_groups`` is muP by hand without writing a factory: a plain torch AdamW / Adam / SGD whose
parameter groups get the learning rates mup's MuAdamW / MuAdam / MuSGD would give, the growing
dimensions found from the builder at two widths (:func:`mup_groups`).

``muon`` is two optimizers stepped as one (:class:`MuonWithAdamW`), as Muon is used in practice:
``torch.optim.Muon`` on the hidden matrices (2-D, both dimensions growing with width: mup's
``infshape``, which ``parametrization=mup`` and ``sp`` set; under ``none`` name them with
``hidden=``), MuAdamW / AdamW on everything else. Muon's ``adjust_lr_fn="original"`` keeps the
update's spectral norm ~ sqrt(fan_out / fan_in), flat in width, so Muon's own lr is not width-scaled
under muP; ``"match_rms_adamw"`` grows it like width^0.5 and fails a coordinate check
(``experiments/muon.py``).
"""

from __future__ import annotations

import fnmatch
import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import mup
import torch
from mup.infshape import InfShape
from torch import nn

from coordcheck.core.errors import CoordCheckError
from coordcheck.setup.parametrization import routers, width_infshapes

__all__ = ["adam", "adamw", "sgd", "muon", "MuonWithAdamW", "hidden_matrices", "muon_lr_factor", "MUON_ADJUST_LR",
           "MUON_WIDTH_INVARIANT", "mup_groups", "mup_param_groups", "GROUP_KINDS", "OPTIMIZERS", "with_mu"]


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


# --- Muon on the hidden matrices, (Mu)AdamW on the rest -------------------------------------------------------------

# torch.optim.Muon's shape adjustments of the lr (torch/optim/_muon.py): for a (fan_out, fan_in) = (A, B) matrix
# "original" (Keller Jordan) lr * sqrt(max(1, A / B)), "spectral_unclamped" (Bernstein) lr * sqrt(A / B),
# "match_rms_adamw" (Moonshot) lr * 0.2 * sqrt(max(A, B)). The orthogonalised update has every singular value near 1,
# so the update's spectral norm is the adjusted lr (measured: 1.2 x it). "spectral_unclamped" is the spectral condition
# of Yang, Simon & Bernstein (2023), ||dW||_2 ~ sqrt(fan_out / fan_in), and "original" the same clamped below at 1 (a
# constant factor for a down-projection): both flat in width for hidden matrices. "match_rms_adamw" grows it like
# width^0.5 and fails a coordinate check (experiments/muon.py). "original" is the default (torch's and Keller Jordan's).
MUON_ADJUST_LR = {
    "original": lambda a, b: math.sqrt(max(1.0, a / b)),
    "spectral_unclamped": lambda a, b: math.sqrt(a / b),
    "match_rms_adamw": lambda a, b: 0.2 * math.sqrt(max(a, b)),
}
MUON_WIDTH_INVARIANT = "original"  # the muP default (conf/optimizer/muon.yaml)


def muon_lr_factor(adjust_lr_fn: str, shape: Sequence[int]) -> float:
    """The factor torch.optim.Muon multiplies a (fan_out, fan_in, ...) matrix's lr by under ``adjust_lr_fn``."""
    if adjust_lr_fn not in MUON_ADJUST_LR:
        raise CoordCheckError(
            f"optimizer.adjust_lr_fn must be one of {', '.join(MUON_ADJUST_LR)}, got {adjust_lr_fn!r}")
    return MUON_ADJUST_LR[adjust_lr_fn](float(shape[0]), float(shape[1]))


def hidden_matrices(model: nn.Module, hidden: Sequence[str] | None = None) -> list[str]:
    """Names of the parameters Muon takes: the 2-D matrices whose two dimensions both grow with width.

    With ``hidden`` (shell patterns on parameter names, e.g. ``transformer.h.*.weight``) the 2-D parameters that match
    one. Otherwise from mup's ``infshape`` (two infinite dimensions), which ``parametrization=mup`` and ``sp`` set by
    comparing the builder's shapes at two widths; a model without infinite dimensions (``parametrization=none``
    without ``mup.set_base_shapes``) cannot say, and is refused in one line.
    """
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if hidden is not None:
        patterns = [hidden] if isinstance(hidden, str) else list(hidden)
        names = [n for n, p in params if p.ndim == 2 and any(fnmatch.fnmatchcase(n, pat) for pat in patterns)]
        if not names:
            raise CoordCheckError(f"optimizer.hidden={patterns} matches no 2-D parameter of the model")
        return names
    if not any(d.isinf() for _, p in params for d in getattr(p, "infshape", ())):
        raise CoordCheckError(
            "optimizer=muon cannot tell which matrices grow with width in this model (no mup base shapes): "
            "name them, e.g. optimizer.hidden=[transformer.h.*.weight], or use parametrization=mup")
    names = [n for n, p in params if p.ndim == 2 and p.infshape.ninf() == 2]
    if not names:
        raise CoordCheckError("optimizer=muon: the model has no 2-D matrix whose two dimensions grow with width "
                              "(Muon's part would be empty): use optimizer=adamw")
    return names


class MuonWithAdamW(torch.optim.Optimizer):
    """Two optimizers stepped as one: ``torch.optim.Muon`` on the hidden matrices, an AdamW on the rest.

    ``param_groups`` are the two optimizers' own group dicts (Muon's first; Muon's carry ``adjust_lr_fn``), so a
    change of ``lr`` there reaches them; ``.muon`` and ``.adamw`` are the two parts.
    """

    def __init__(self, muon: torch.optim.Optimizer, adamw: torch.optim.Optimizer):
        self.muon, self.adamw = muon, adamw
        super().__init__(muon.param_groups + adamw.param_groups, {})  # add_param_group keeps each dict itself

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.muon.step()
        self.adamw.step()
        return loss

    def state_dict(self) -> dict:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])


def muon(
    model: nn.Module, lr: float, *, mu: bool = False, adjust_lr_fn: str = MUON_WIDTH_INVARIANT,
    muon_lr_ratio: float = 1.0, momentum: float = 0.95, nesterov: bool = True, ns_steps: int = 5,
    hidden: Sequence[str] | None = None, betas: Sequence[float] = (0.9, 0.999), eps: float = 1e-8,
    weight_decay: float = 0.01,
) -> MuonWithAdamW:
    """``torch.optim.Muon`` (lr ``lr * muon_lr_ratio``, shape-adjusted by ``adjust_lr_fn``) on the hidden matrices
    (:func:`hidden_matrices`), AdamW on everything else — embeddings, norms, biases, readout, non-2-D hidden weights
    such as convolutions — with MuAdamW for that part when ``mu=True``. ``weight_decay`` is decoupled in both."""
    muon_lr_factor(adjust_lr_fn, (1, 1))  # one line for an unknown setting, before anything is built
    names = set(hidden_matrices(model, hidden))
    matrices = [p for n, p in model.named_parameters() if n in names]
    rest = [p for n, p in model.named_parameters() if n not in names and p.requires_grad]
    muon_part = torch.optim.Muon(matrices, lr=_float_lr(lr) * muon_lr_ratio, weight_decay=weight_decay,
                                 momentum=momentum, nesterov=nesterov, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn)
    cls = mup.MuAdamW if mu else torch.optim.AdamW
    return MuonWithAdamW(muon_part, cls(rest, lr=_float_lr(lr), betas=tuple(betas), eps=eps,
                                        weight_decay=weight_decay))


# --- muP by hand: width-scaled parameter groups on a plain torch optimizer -------------------------------------------

GroupKind = Literal["adamw", "adam", "sgd"]
GROUP_KINDS: dict[str, type[torch.optim.Optimizer]] = {
    "adamw": torch.optim.AdamW, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}


def mup_param_groups(model: nn.Module, infshapes: Mapping[str, InfShape], lr: float, weight_decay: float,
                     kind: GroupKind) -> list[dict]:
    """The parameter groups mup's optimizers make (mup 1.0.0, ``mup/optim.py``), from ``infshapes``
    (:func:`coordcheck.setup.parametrization.width_infshapes`) instead of ``p.infshape``; one group per multiplier.

    Adam family (MuAdam, MuAdamW): a matrix with two dimensions that grow (``ninf() == 2``, "hidden") gets
    ``lr / width_mult`` and ``weight_decay * width_mult`` (``width_mult`` = fan_in / base fan_in, i.e. width /
    base_width when the fan-in is proportional to width; for AdamW the per-step shrink lr·λ stays constant); every
    other parameter keeps ``lr`` and ``weight_decay``. SGD (MuSGD): a parameter with one growing dimension
    (``ninf() == 1``: input weights, biases, norm gains, the readout weight) gets ``lr * width_mult`` and
    ``weight_decay / width_mult``; a hidden matrix ``lr / r`` and ``weight_decay * r`` with ``r`` = fan_in's
    width_mult / fan_out's (1 when both grow alike); one with none keeps both. A router — an output-like matrix
    inside the blocks that is not a ``MuReadout`` (:func:`coordcheck.setup.parametrization.routers`) — gets
    ``lr / width_mult`` and ``weight_decay * width_mult`` under every kind: an output weight without a multiplier
    (Tensor Programs V, Table 3), where mup's optimizers would leave it at the base lr and rely on a MuReadout's.
    """
    groups: dict[tuple[str, float], dict] = {}
    inside = routers(model, infshapes)
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        shape = infshapes[name]
        if name in inside:  # an output weight with no multiplier (a router): lr ∝ 1/fan_in, TP5 Table 3
            key = ("router", shape.width_mult())
            group_lr, group_wd = lr / shape.width_mult(), weight_decay * shape.width_mult()
        elif kind == "sgd" and shape.ninf() == 1:  # as MuSGD computes them, so that the floats match
            key = ("vector", shape.width_mult())
            group_lr, group_wd = lr * shape.width_mult(), weight_decay / shape.width_mult()
        elif kind == "sgd" and shape.ninf() == 2:
            key = ("matrix", shape.fanin_fanout_mult_ratio())
            group_lr, group_wd = lr / shape.fanin_fanout_mult_ratio(), weight_decay * shape.fanin_fanout_mult_ratio()
        elif shape.ninf() == 2:  # as MuAdam
            key = ("matrix", shape.width_mult())
            group_lr, group_wd = lr / shape.width_mult(), weight_decay * shape.width_mult()
        else:
            key, group_lr, group_wd = ("fixed", 1.0), lr, weight_decay
        groups.setdefault(key, {"params": [], "lr": group_lr, "weight_decay": group_wd})["params"].append(p)
    return list(groups.values())


def mup_groups(
    model: nn.Module, lr: float, *, build: Callable[..., nn.Module], base_width: int,
    kind: GroupKind = "adamw", betas: Sequence[float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01,
    momentum: float = 0.0,
) -> torch.optim.Optimizer:
    """muP without the mup package: a plain ``torch.optim`` AdamW / Adam / SGD (``kind``) whose parameter groups
    carry the learning rates (and weight decays) mup's MuAdamW / MuAdam / MuSGD would give (:func:`mup_param_groups`).

    Which dimensions grow with width is found as mup's base shapes find it: the builder at ``base_width`` and
    ``2 * base_width`` on the meta device (:func:`coordcheck.setup.parametrization.width_infshapes`), against the
    model's
    own shapes; the harness passes ``build`` and ``base_width`` because this factory's signature names them. Nothing
    is set on the model, so it works under ``parametrization=none`` for models whose forward carries the muP
    multipliers (an output multiplier such as Granite's ``logits_scaling``), and gives MuAdamW's learning rates under
    ``mup``. ``betas`` and ``eps``: the Adam family's; ``momentum``: SGD's.
    """
    if kind not in GROUP_KINDS:
        raise CoordCheckError(f"optimizer.kind must be one of {', '.join(GROUP_KINDS)}, got {kind!r}")
    if kind != "sgd" and momentum:
        raise CoordCheckError(f"optimizer.momentum={momentum} is SGD's: set optimizer.kind=sgd, or leave it at 0 "
                              f"(Adam's momentum is optimizer.betas)")
    groups = mup_param_groups(model, width_infshapes(model, build, base_width, who="optimizer=mup_groups"),
                              _float_lr(lr), float(weight_decay), kind)
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=_float_lr(lr), momentum=momentum, weight_decay=weight_decay)
    return GROUP_KINDS[kind](groups, lr=_float_lr(lr), betas=tuple(betas), eps=eps, weight_decay=weight_decay)


OPTIMIZERS = {"adam": adam, "adamw": adamw, "sgd": sgd, "muon": muon, "mup_groups": mup_groups}


def with_mu(factory: Callable[..., torch.optim.Optimizer], mu: bool) -> Callable[..., torch.optim.Optimizer]:
    """A built-in factory with ``mu`` bound (the Mu* variant under mup), as the optimizer configs bind it; one that
    takes no ``mu`` (``mup_groups``) as it is."""
    return functools.partial(factory, mu=mu) if "mu" in inspect.signature(factory).parameters else factory
