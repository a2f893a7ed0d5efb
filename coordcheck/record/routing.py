"""The routers' hooks of the probes: a router's choice of experts counted, from a top-k or from what it returns.

Stage: record (a part of :class:`coordcheck.record.probes.Probes`, which inherits it: the state it reads and writes is
the probes' own). Input: a top-k the function probe saw inside a running module (:meth:`RouterHooks.routing`), or a
module's output at the end of its forward (:meth:`RouterHooks._returned_choice`). Output: the counts of
:class:`coordcheck.record.load.Choices` under ``<router>.(load)``, which the probes turn into the load rows.
"""

from __future__ import annotations

import torch
from torch import nn

from coordcheck.core.frame import ROOT_MODULE
from coordcheck.record.load import LOAD_OP, LOAD_SUFFIX, returned_choice

__all__ = ["RouterHooks"]


class RouterHooks:
    """The probes' router hooks (a mixin of :class:`coordcheck.record.probes.Probes`)."""

    def routing(self, index: torch.Tensor, candidates: int, k: int, dim: int, ndim: int) -> None:
        """A top-k of ``k`` of ``candidates`` over dimension ``dim`` of ``ndim`` inside the running module chose
        ``index``: a router's choice of experts, counted under ``<module>.(load)`` (:class:`coordcheck.record.load.
        Choices`: every call of one module in a forward adds up; a top-k that is no such choice is a note)."""
        if not self._counts_load:
            return
        parent = self._parent()
        if self.step == 0 and not self._choices.saw_top_k(parent, k, candidates, dim, ndim):
            return  # (an auxiliary loss's top-k over every layer's logits, in the model's own forward: no router's)
        if dim == ndim - 1 and k < candidates and parent != ROOT_MODULE:
            self._functions_seen = True
            self._count_choice(parent, index, candidates)

    def _count_choice(self, router: str, index: torch.Tensor, experts: int) -> None:
        name = self._choices.count(router, index, experts)
        if name is not None and self.step == 0 and name not in self._captured:
            self._fired.append(name)
            self._captured[name] = router
            self._capture_ops[name] = LOAD_OP

    def _returned_choice(self, name: str, module: nn.Module, inputs: tuple, output: object) -> None:
        """A router that returns the experts it chose and took no top-k (decided at step 0): count what it returned. At
        step 0, also: an expert stack called with integer indices (a router's choice, for the notes)."""
        if self.step == 0:
            if name in self._stacks and any(isinstance(t, torch.Tensor) and not t.is_floating_point()
                                            and t.dtype != torch.bool for t in inputs):
                self._choices.given_indices(name, self._stacks[name])
            took_top_k = f"{name}.{LOAD_SUFFIX}" in self._choices.counts
            if isinstance(output, torch.Tensor) or name == ROOT_MODULE or took_top_k:
                return
            found = returned_choice(module, output)
            if found is None or not bool(((found[0] >= 0) & (found[0] < found[1])).all()):  # (step 0 only: a sync)
                return
            self._choices.returned.add(name)
        elif name in self._choices.returned:
            found = returned_choice(module, output)
            if found is None:
                return
        else:
            return
        self._count_choice(name, *found)

