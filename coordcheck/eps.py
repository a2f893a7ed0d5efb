"""Adam's epsilon, measured: per parameter and step, the fraction of coordinates where ε is not small against √v̂.

Stage: measure (beside the probes; optimizer side). Input: an Adam-family optimizer (state ``exp_avg_sq``) right
after each ``optimizer.step()``. Output: rows of the tidy frame (``coordcheck.frame`` schema) with ``tensor="eps"``,
``module`` = the parameter's dotted name, the owning module's ``layer_index`` / ``role`` / ``call_order``, ``stat``
``mean`` and ``value`` = the fraction, at ``step`` t = after t updates (the step whose forward sees them).

Adam's update of a coordinate is ``m̂ / (√v̂ + ε)`` with ``v̂ = exp_avg_sq / (1 − β2^t)``. Where ``ε ≥ r·√v̂``
(``r`` = :data:`EPS_RATIO` = 0.1) ε shrinks that coordinate's step by at least ``1 − 1/(1 + r)`` = 9 % against
ε = 0 — more than the seed-to-seed scatter of a step, and at ``ε = √v̂`` it halves it. Under muP the gradient of a
hidden matrix shrinks like 1/width, so √v̂ does too, and a fixed ε takes over the update at large width: the
fraction grows with width (Everett et al. 2024, *Scaling exponents across parameterizations and optimizers*). The
fraction is judged in :mod:`coordcheck.audit` (:func:`coordcheck.audit.eps_causes`).

Coordinates whose gradient has been exactly zero so far (``v̂ = 0``: upstream of a zero-initialised readout at the
first update, say) are not counted: their step is zero with any ε.

Cost: two comparisons, an ``and`` and a sum per parameter (``0 < exp_avg_sq <= thr`` with ``thr = (1 − β2^t)(ε/r)²``,
computed once per group), on the device; the counts of every step stay there and are moved to the host once, at the end of
training (:meth:`EpsProbe.fractions`) — no ``.item()`` per parameter or per step. ``experiments/eps.py --cost``
counts the elements this touches against those of the optimizer's own step.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch
from torch import nn

from coordcheck.frame import COLUMNS, ROOT_MODULE, conform

__all__ = ["EPS_RATIO", "EPS_TENSOR", "EpsProbe", "eps_frame"]

EPS_RATIO = 0.1  # ε counts where ε >= EPS_RATIO * sqrt(v_hat): the coordinate's step is cut by >= 9 %
EPS_TENSOR = "eps"  # the frame's tensor kind for these rows


class EpsProbe:
    """Counts, after each update, the coordinates of each Adam-family parameter where ε ≥ ``ratio``·√v̂."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, ratio: float = EPS_RATIO):
        self.optimizer, self.ratio = optimizer, ratio
        names = {id(p): n for n, p in model.named_parameters()}
        self.groups = [(g, [p for p in g["params"] if id(p) in names]) for g in optimizer.param_groups
                       if "betas" in g and "eps" in g]  # Adam-like groups (Muon's eps is not Adam's)
        self.names = [names[id(p)] for _, ps in self.groups for p in ps]
        self.sizes = torch.tensor([p.numel() for _, ps in self.groups for p in ps], dtype=torch.float64)
        self.steps: list[int] = []
        self._counts: list[torch.Tensor] = []

    def __bool__(self) -> bool:
        return bool(self.names)

    @torch.no_grad()
    def record(self, step: int) -> None:
        """After ``optimizer.step()``: the counts of this step (on the device), for frame step ``step``."""
        counts = []
        for group, params in self.groups:
            beta2, eps = group["betas"][1], float(group["eps"])
            thr = None
            for p in params:
                state = self.optimizer.state.get(p, {})
                v = state.get("max_exp_avg_sq", state.get("exp_avg_sq")) if group.get("amsgrad") else \
                    state.get("exp_avg_sq")
                if v is None:  # no update yet (no gradient): not counted
                    counts.append(torch.full((), float("nan"), dtype=torch.float64, device=p.device))
                    continue
                if thr is None:  # the group's parameters share Adam's step count
                    t = state["step"]
                    bias = 1 - beta2 ** (t.to(v.device, torch.float64) if torch.is_tensor(t) else float(t))
                    thr = bias * (eps / self.ratio) ** 2
                counts.append(torch.logical_and(v > 0, v <= thr).sum().to(torch.float64))
        if counts:
            self.steps.append(step)
            self._counts.append(torch.stack([c.to(counts[0].device) for c in counts]))

    def fractions(self) -> np.ndarray:
        """``(steps, parameters)`` fractions, moved to the host in one transfer."""
        if not self._counts:
            return np.zeros((0, len(self.names)))
        return (torch.stack(self._counts).cpu() / self.sizes).numpy()


def _owner(name: str, layout: dict[str, tuple[int, str, int]]) -> tuple[int, str, int]:
    """The layout of the innermost recorded module that owns parameter ``name`` (else its nearest recorded
    parent; else the root's, else ``(-1, "hidden", -1)``)."""
    parts = name.split(".")[:-1]
    while parts:
        found = layout.get(".".join(parts))
        if found is not None:
            return found
        parts.pop()
    return layout.get(ROOT_MODULE, (-1, "hidden", -1))


def eps_frame(probe: EpsProbe, layout: dict[str, tuple[int, str, int]], identity: Mapping[str, object]
              ) -> pd.DataFrame:
    """The probe's fractions as a tidy frame; ``identity``: the identity columns (``config_id`` ... ``seed``)."""
    fr = probe.fractions()
    owners = [_owner(n, layout) for n in probe.names]
    k = len(probe.names)
    df = pd.DataFrame({
        "step": np.repeat(probe.steps, k),
        "module": np.tile(probe.names, len(probe.steps)),
        "layer_index": np.tile([o[0] for o in owners], len(probe.steps)),
        "role": np.tile([o[1] for o in owners], len(probe.steps)),
        "call_order": np.tile([o[2] for o in owners], len(probe.steps)),
        "head_dim": 0,
        "tensor": EPS_TENSOR,
        "stat": "mean",
        "value": fr.reshape(-1),
    })
    for col, val in identity.items():
        df[col] = val
    return conform(df[list(COLUMNS)])
