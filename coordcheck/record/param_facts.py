"""Parameter facts: what each parameter is given before training, read from the model and its optimizer.

Stage: build (the audit's torch side). Input: the parametrized model and its optimizer as built at one width
(``coordcheck.run.train.build_on``), before any step. Output: a JSON-able dict recorded in the job's facts as
``audit`` (so in ``job.json`` too): the labels beside the measured facts (:mod:`coordcheck.judge.facts`, which never
imports
torch)::

    {"parametrization": "mup",
     "params": {name: {"dims": [...], "embedding": bool, "std": float, "rms": float,
                       "family": "adam" | "adamw" | "sgd" | "muon" | "<class name>" | "",
                       "lr": float, "wd": float, "wd_kind": "coupled" | "decoupled" | "",
                       "eps": float | None, "mult": float | None}}}

* ``std`` / ``rms``: of the built tensor (float64 on the host; one transfer for all parameters).
* ``family``: the group's own ``kind`` when it is one of these (nanochat's ``MuonAdamW``), else from the keys of the
  parameter's group (``adjust_lr_fn``: Muon; ``betas``: Adam-like, ``adamw`` when
  the weight decay is decoupled — ``torch.optim.AdamW`` or ``decoupled_weight_decay=True``; ``momentum`` and
  ``dampening``: SGD), so it holds for optimizers built from several groups (mup's MuAdam, a Muon + AdamW mix);
  ``""`` for a parameter that no group holds (not trained).
* ``lr``: the step size the optimizer applies to this parameter: the group's ``lr`` (mup's Mu* optimizers already
  put their width-scaled lrs in their groups), times Muon's shape adjustment (``adjust_lr_fn``, as
  ``torch.optim.Muon`` applies it to the parameter's shape).
* ``wd``: weight decay as applied: the coefficient ``λ`` for coupled decay (Adam, SGD: ``λ·W`` is added to the
  gradient), the per-step shrink ``lr·λ`` for decoupled decay (AdamW, Muon: ``W ← W (1 − lr·λ)``, with Muon's
  unadjusted lr).
* ``eps``: Adam's ε (Adam-like groups only; Muon's ``eps`` is the Newton–Schulz guard, not recorded).
* ``mult``: the forward multiplier the audit can see: ``output_mult / width_mult`` of a ``mup.MuReadout``'s weight;
  ``None`` elsewhere (a multiplier written in ``forward`` is invisible here).
* ``owner``: what owns the parameter (:func:`_owners`): the audit leaves a vector owned by a module of no known op
  (``""``) unjudged — no muP rule is established for a selective scan's parameters.
* ``embedding``: the parameter is an ``nn.Embedding``'s weight, whose fan-in is dimension 0 (``(num_embeddings,
  dim)``), not dimension 1 as for ``nn.Linear``'s ``(out, in)``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from coordcheck.record.layout import op_kind
from coordcheck.setup.optim import MUON_ADJUST_LR

__all__ = ["param_facts", "optimizer_family", "effective_lr"]


KINDS = ("adam", "adamw", "sgd", "muon")


def optimizer_family(optimizer: torch.optim.Optimizer, group: dict) -> str:
    """``adam`` / ``adamw`` / ``sgd`` / ``muon``, or the optimizer's class name, from one parameter group: its own
    ``kind`` when it names one of these (one optimizer holding several kinds of group, as nanochat's ``MuonAdamW``),
    else its keys."""
    kind = str(group.get("kind", "")).lower()
    if kind in KINDS:
        return kind
    if "adjust_lr_fn" in group or "ns_steps" in group:
        return "muon"
    if "betas" in group:
        decoupled = isinstance(optimizer, torch.optim.AdamW) or bool(group.get("decoupled_weight_decay", False))
        return "adamw" if decoupled else "adam"
    if "momentum" in group and "dampening" in group:
        return "sgd"
    return type(optimizer).__name__


def muon_adjusted_lr(lr: float, adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """The lr ``torch.optim.Muon`` applies to a parameter of ``shape`` (:data:`coordcheck.setup.optim.MUON_ADJUST_LR`:
    A = fan-out, B = fan-in; ``original`` when unset, unchanged for a setting it does not know)."""
    factor = MUON_ADJUST_LR.get(adjust_lr_fn or "original")
    return lr if len(shape) < 2 or factor is None else lr * factor(float(shape[0]), float(shape[1]))


def effective_lr(family: str, group: dict, p: torch.Tensor) -> float:
    lr = float(group["lr"])
    return muon_adjusted_lr(lr, group.get("adjust_lr_fn"), p.shape) if family == "muon" else lr


def _readout_mults(model: nn.Module) -> dict[int, float]:
    """``id(weight) -> output_mult / width_mult`` of every ``mup.MuReadout`` with base shapes."""
    from mup import MuReadout

    out = {}
    for module in model.modules():
        if isinstance(module, MuReadout) and hasattr(module.weight, "infshape"):
            out[id(module.weight)] = float(module.output_mult) / float(module.width_mult())
    return out


def _owners(model: nn.Module) -> dict[str, str]:
    """``name -> what owns it``: the owning module's op (:func:`coordcheck.record.layout.op_kind`: ``linear``,
    ``conv``, ``embedding``, ``norm``; ``norm`` too for a class named like one), ``matrices`` for a module of no known
    op that owns a parameter of two or more dimensions (a custom linear layer, GPT-2's Conv1D), else ``""``: a module
    ``single`` for one that owns one vector, else ``""``: a module that owns two or more vectors only and computes
    something else with them (a selective scan's ``A_log``, ``D``, ``dt_bias``)."""
    out = {}
    for mod_name, module in model.named_modules():
        own = list(module.named_parameters(recurse=False))
        if not own:
            continue
        kind = op_kind(module)  # "norm" by type or class name (coordcheck.record.layout.is_norm)
        if not kind and any(p.dim() >= 2 for _, p in own):
            kind = "matrices"
        elif not kind and len(own) < 2:
            kind = "single"  # one vector of its own (a LayerScale gain, a learned bias): not a scan's
        for n, _ in own:
            out.setdefault(f"{mod_name}.{n}" if mod_name else n, kind)
    return out


@torch.no_grad()
def param_facts(model: nn.Module, optimizer: torch.optim.Optimizer, parametrization: str) -> dict:
    """The audit facts of every parameter of ``model`` (shared parameters once), in registration order."""
    named = list(model.named_parameters())
    groups = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    mults = _readout_mults(model)
    owners = _owners(model)
    whole = [(getattr(p, "full_tensor", None) or p.detach)().detach() for _, p in named]  # a sharded one's whole
    moments = [torch.stack([w.double().mean(), w.double().square().mean()])
               if w.numel() else torch.full((2,), float("nan"), dtype=torch.float64, device=w.device)
               for w in whole]  # mean and mean square of each parameter, on its device
    sums = torch.stack(moments).cpu().tolist() if named else []  # moved to the host once
    params = {}
    for (name, p), (mean, sq) in zip(named, sums):
        n = p.numel()
        var = max(sq - mean * mean, 0.0) * n / (n - 1) if n > 1 else float("nan")
        group = groups.get(id(p))
        family = optimizer_family(optimizer, group) if group is not None else ""
        lr = effective_lr(family, group, p) if group is not None else float("nan")
        lam = float(group.get("weight_decay", 0.0) or 0.0) if group is not None else float("nan")
        decoupled = family in ("adamw", "muon")
        params[name] = {
            "dims": list(p.shape),
            "embedding": id(p) in embeddings,
            "std": math.sqrt(var) if math.isfinite(var) else None,
            "rms": math.sqrt(sq) if math.isfinite(sq) else None,
            "family": family,
            "lr": lr if math.isfinite(lr) else None,
            "wd": (float(group["lr"]) * lam if decoupled else lam) if group is not None else None,
            "wd_kind": ("decoupled" if decoupled else "coupled") if group is not None else "",
            "eps": float(group["eps"]) if group is not None and family in ("adam", "adamw") else None,
            "mult": mults.get(id(p)),
            "owner": owners.get(name, ""),
        }
    return {"parametrization": parametrization, "params": params}
