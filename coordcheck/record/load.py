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
"""

from __future__ import annotations

import math

import torch

from coordcheck.core.frame import LOAD_TENSOR

__all__ = ["LOAD_TENSOR", "LOAD_SUFFIX", "LOAD_OP", "LOAD_STATS", "load_stats"]

LOAD_SUFFIX = "(load)"
LOAD_OP = "load"
LOAD_STATS = ("max_load", "entropy")


def load_stats(counts: torch.Tensor) -> torch.Tensor:
    """``(max_load, entropy)`` of the tokens each expert got (``counts``: (E,), any dtype), on its device; NaN when
    nothing was routed."""
    c = counts.to(torch.float64)
    e = c.numel()
    share = c / c.sum()
    ent = -torch.special.xlogy(share, share).sum() / math.log(e) if e > 1 else torch.ones((), dtype=c.dtype)
    return torch.stack([share.max() * e, ent])
