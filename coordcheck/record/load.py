"""The routing's health: how a mixture-of-experts router spreads the tokens over its experts, per step.

Stage: record (called by :class:`coordcheck.record.probes.Probes`). Input: the experts a router chose for every token
in one step (every call of that module in the forward, pooled; :class:`Choices`), seen in one of two ways:

* the function probe sees a **top-k over the last dimension inside a module** — ``torch.topk`` or ``Tensor.topk``, its
  arguments positional or by keyword, over softmax or sigmoid scores or raw logits: ``k`` of ``E`` experts for every
  token. A router that takes several top-k (DeepSeek-V3's, GLM-4-MoE's grouped routing, ``n_group`` /
  ``topk_group``: a top-2 inside each group, a top-k over the groups, then the top-k over the experts) is counted by
  the one over the most candidates, its choice of experts, never by the ones over groups;
* a router module **returns the indices it chose** beside its logits (``(logits (.., E), ..., indices (.., k))``,
  as every transformers 5 router does) and took no top-k: PhiMoE's sparsemixer, which chooses by ``max`` and Gumbel
  sampling. Read only where ``E`` is a dimension of the module's own weight, and checked at step 0 to lie in
  ``[0, E)``.

Where a router's choice cannot be counted, :meth:`Choices.notes` says so in one line naming the module and why (the job
log and the job's facts carry it): a top-k that takes every candidate (``k = E``: every token goes to every expert, a
dense layer), one over another dimension than the last (experts choosing tokens), one in the model's own forward
outside any module, or an expert stack (a 3-D parameter, experts first) given integer indices that no counted router
produced. Output: two numbers per router and step, the frame's ``tensor="load"`` rows of the module
``<router>.(load)``:

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
import torch
from torch import nn

from coordcheck.core.frame import LOAD_TENSOR, ROOT_MODULE

__all__ = ["LOAD_TENSOR", "LOAD_SUFFIX", "LOAD_OP", "LOAD_STATS", "POOLED", "load_stats", "expert_members",
           "pooled_layout", "Choices", "returned_choice", "expert_stacks"]

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


def expert_stacks(model: nn.Module) -> dict[str, int]:
    """``{module: E}`` for the modules that hold an expert stack: a 3-D parameter of their own, experts first (a
    convolution's 3-D weight is not one)."""
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.conv._ConvNd):
            continue
        stack = next((p for p in module.parameters(recurse=False) if p.ndim == 3 and p.shape[0] >= 2), None)
        if stack is not None:
            out[name or ROOT_MODULE] = int(stack.shape[0])
    return out


def returned_choice(module: nn.Module, output: object) -> tuple[torch.Tensor, int] | None:
    """``(indices, E)`` when a module returns the experts it chose beside its logits: an integer tensor ``(.., k)`` and
    a floating one ``(.., E)`` with the same leading dimensions, ``0 < k < E`` and ``E`` a dimension of the module's
    own weight (a router's: width -> E). None otherwise (no host sync: shapes and dtypes only)."""
    if not isinstance(output, (tuple, list)):
        return None
    tensors = [t for t in output if isinstance(t, torch.Tensor) and t.ndim >= 1]
    ints = [t for t in tensors if not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool]
    if not ints:
        return None
    dims = {d for p in module.parameters(recurse=False) if p.ndim >= 2 for d in p.shape}
    for index in ints:
        for logits in tensors:
            e = logits.shape[-1]
            if (logits.is_floating_point() and logits.ndim == index.ndim and logits.shape[:-1] == index.shape[:-1]
                    and 0 < index.shape[-1] < e and e in dims):
                return index, int(e)
    return None


class Choices:
    """The routers' choices of experts in one step, counted per router as ``<router>.(load)`` (:meth:`count`), and
    what step 0 showed of routers whose choice was not counted (:meth:`notes`). Module docstring: which choices."""

    def __init__(self) -> None:
        self.counts: dict[str, torch.Tensor] = {}  # load name -> tokens per expert this step (int64, on the device)
        self.returned: set[str] = set()  # routers whose choice is read from the indices they return (step 0 on)
        self._dense: dict[str, tuple[int, int]] = {}  # module -> (k, E) of a top-k that takes every candidate
        self._other_dim: dict[str, tuple[int, int]] = {}  # module -> (dim, ndim) of a top-k not over the last dim
        self._root: tuple[int, int] | None = None  # (k, E) of a top-k in the model's own forward
        self._given: dict[str, int] = {}  # expert stacks called with integer indices -> their E

    def begin_step(self) -> None:
        self.counts = {}

    def count(self, router: str, index: torch.Tensor, experts: int) -> str | None:
        """Add ``index`` (values in ``[0, experts)``) to ``router``'s tokens per expert this step; its load's name, or
        None for a top-k over fewer candidates than one this router already took (a grouped router's top-k over its
        groups, or inside each group: not its choice of experts). A top-k over more candidates replaces them."""
        name = f"{router}.{LOAD_SUFFIX}"
        before = self.counts.get(name)
        if before is not None and before.numel() > experts:
            return None
        flat = index.reshape(-1).long()
        counts = torch.zeros(experts, dtype=torch.long, device=index.device).scatter_add_(
            0, flat, torch.ones_like(flat))  # no host sync (bincount sizes its output from the data)
        self.counts[name] = counts if before is None or before.numel() < experts else before + counts
        return name

    def saw_top_k(self, module: str, k: int, candidates: int, dim: int, ndim: int) -> bool:
        """A top-k at step 0 that is no router's choice of experts as it stands: remembered for :meth:`notes`. True when
        it is one (inside a module, over the last dimension, ``k`` below the candidates): count it."""
        if module == ROOT_MODULE:
            self._root = self._root or (k, candidates)
        elif dim != ndim - 1:
            self._other_dim.setdefault(module, (dim, ndim))
        elif k >= candidates:
            self._dense.setdefault(module, (k, candidates))
        else:
            return True
        return False

    def given_indices(self, module: str, experts: int) -> None:
        """At step 0, an expert stack of ``experts`` was called with integer indices (a router's choice)."""
        self._given.setdefault(module, experts)

    def notes(self, counted: Sequence[str]) -> dict[str, str]:
        """``{module: one line}`` for each router whose choice step 0 saw but did not count; ``counted``: the routers
        (modules) whose load is recorded."""
        def has_load(module: str) -> bool:
            return any(r == module or r.startswith(module + ".") for r in counted)

        out = {}
        for m, (k, e) in self._dense.items():
            if not has_load(m):
                out[m] = (f"its top-k takes all {e} of {e} candidates (k = {k}): every token goes to every expert, a "
                          "dense layer with no load to judge — choose fewer experts per token than there are "
                          "(num_experts_per_tok) for a sparse mixture")
        for m, (dim, ndim) in self._other_dim.items():
            if not has_load(m):
                out[m] = (f"a top-k over dimension {dim} of {ndim}, not the last (experts choosing tokens?): not "
                          "counted as a router's choice of experts, which the load is read from (a top-k over the "
                          "experts, the last dimension)")
        for m, e in self._given.items():
            layer = m.rpartition(".")[0] if "." in m else ROOT_MODULE
            if not has_load(layer) and not any(n.startswith(layer + ".") or n == layer for n in out):
                out[m] = (f"its {e} experts are chosen by integer indices that no router the probes see produced (no "
                          "top-k inside a module, no indices returned beside a router's logits): the routing load of "
                          "this layer is not recorded")
        if self._root is not None and not counted:
            k, e = self._root
            out[ROOT_MODULE] = (f"a top-k of {k} of {e} in the model's own forward, outside any module: not counted "
                                "as a router's choice (the load is read inside the router's module) — compute the "
                                "routing in a module")
        return out
