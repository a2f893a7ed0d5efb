"""The routing's health: how a mixture-of-experts router spreads the tokens over its experts, per step.

Stage: record (called by :class:`coordcheck.record.probes.Probes` when the function probe sees a ``topk`` over the last
dimension inside a module: a router choosing ``k`` of ``E`` experts for every token). Input: the chosen indices of one
step (every call of that module in the forward, pooled). Output: two numbers per router and step, the frame's
``tensor="load"`` rows of the module ``<router>.(load)``:

* ``max_load``: the busiest expert's share of the routed slots times ``E`` — 1 when every expert gets the same number
  of tokens, ``E / k`` when every token goes to the same ``k`` experts (Switch Transformer's "load" relative to a
  balanced one);
* ``entropy``: the entropy of the experts' shares divided by ``log E`` — 1 balanced, 0 every token to one expert.

A router that **collapses** sends more and more of the tokens to a few experts: ``max_load`` rises and ``entropy``
falls. Under muP a router's logits stay Θ(1) at every width, so its load does not depend on the width
(:data:`coordcheck.judge.rules.RULES`, ``routing-no-collapse``).

**Experts kept as a list of modules** (an ``nn.ModuleList`` of ``E`` modules, ``E`` the number of experts a router in
the same layer chooses from) are recorded as one module per layer, ``<list>.*.<rest>`` (:func:`expert_members`): the
frame does not grow with the number of experts, and their statistics pool exactly (the moments of every member's
output, as several calls of one module pool).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from torch import nn

from coordcheck.core.frame import LOAD_TENSOR

__all__ = ["LOAD_TENSOR", "LOAD_SUFFIX", "LOAD_OP", "LOAD_STATS", "POOLED", "load_stats", "expert_members",
           "pooled_layout"]

LOAD_SUFFIX = "(load)"
LOAD_OP = "load"
LOAD_STATS = ("max_load", "entropy")
POOLED = "*"  # the index of a pooled expert list's members: blocks.0.moe.experts.*.fc1


def load_stats(counts: np.ndarray) -> tuple[float, float]:
    """``(max_load, entropy)`` of the tokens each expert got (``counts``: (E,)); NaN when nothing was routed."""
    c = np.asarray(counts, dtype=np.float64)
    e = c.size
    with np.errstate(divide="ignore", invalid="ignore"):
        share = c / c.sum()
        ent = -np.sum(np.where(share > 0, share * np.log(np.where(share > 0, share, 1.0)), 0.0)) / math.log(e) \
            if e > 1 else 1.0
    return float(share.max() * e), float(ent)


def expert_members(model: nn.Module, experts: Mapping[str, int], captured: Mapping[str, str],
                   fired: Sequence[str]) -> dict[str, str]:
    """``{member module: pooled name}`` for the modules inside an expert list: an ``nn.ModuleList`` of as many
    modules as a router chooses from (``experts``: load name -> E; ``captured``: load name -> the module that ran
    the top-k), whose parent holds that router. Only recorded names (``fired``) are mapped."""
    lists = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) >= 2:
            lists[name] = len(module)
    out: dict[str, str] = {}
    for load, e in experts.items():
        router = captured.get(load, "")
        for name, n in lists.items():
            parent = name.rpartition(".")[0]
            if n == e and (router == parent or router.startswith(parent + ".") if parent else True):
                prefix = name + "."
                for f in fired:
                    if f.startswith(prefix):
                        index, _, rest = f[len(prefix):].partition(".")
                        if index.isdigit():
                            out[f] = f"{name}.{POOLED}" + (f".{rest}" if rest else "")
    return out


def pooled_layout(pooled: Mapping[str, str], layout: dict, modules: dict) -> None:
    """Give each pooled name the layout (layer index, role, first call) and op of its first member, in place."""
    for member, name in pooled.items():
        if member in layout:
            first = layout.get(name)
            layout[name] = layout[member] if first is None or layout[member][2] < first[2] else first
        if member in modules:
            modules.setdefault(name, modules[member])
