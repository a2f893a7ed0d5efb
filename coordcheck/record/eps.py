"""Adam's epsilon, measured: per parameter and step, the fraction of coordinates where ε is not small against √v̂.

Stage: measure (beside the probes; optimizer side). Input: an Adam-family optimizer (state ``exp_avg_sq``) right
after each ``optimizer.step()``. Output: rows of the tidy frame (``coordcheck.core.frame`` schema) with
``tensor="eps"``,
``module`` = the parameter's dotted name, the owning module's ``layer_index`` / ``role`` / ``call_order``, ``stat``
``mean`` and ``value`` = the fraction, at ``step`` t = after t updates (the step whose forward sees them).

Adam's update of a coordinate is ``m̂ / (√v̂ + ε)`` with ``v̂ = exp_avg_sq / (1 − β2^t)``. Where ``ε ≥ r·√v̂``
(``r`` = :data:`EPS_RATIO` = 0.1) ε shrinks that coordinate's step by at least ``1 − 1/(1 + r)`` = 9 % against
ε = 0 — more than the seed-to-seed scatter of a step, and at ``ε = √v̂`` it halves it. Under muP the gradient of a
hidden matrix shrinks like 1/width, so √v̂ does too, and a fixed ε takes over the update at large width: the
fraction grows with width (Everett et al. 2024, *Scaling exponents across parameterizations and optimizers*). The
fraction is read by :mod:`coordcheck.judge.explain`: a note with its forecast where it grows, and the share beside a
cause where an Adam-trained parameter's update falls short of its learning rate.

Coordinates whose gradient has been exactly zero so far (``v̂ = 0``: upstream of a zero-initialised readout at the
first update, say) are not counted: their step is zero with any ε.

Cost: at most :data:`SAMPLE` coordinates per parameter are read (a strided view of ``exp_avg_sq``, every
``numel // SAMPLE``-th coordinate, the stride made odd; smaller parameters whole), concatenated once, compared with
``thr = (1 − β2^t)(ε/r)²`` (one value per group) and summed per parameter with one ``index_add_`` — a few kernels
per step whatever the number of parameters, on the device. The counts of every step stay there and are moved to
the host once, at the end of training (:meth:`EpsProbe.fractions`) — no ``.item()`` per parameter or per step.
``experiments/eps.py --cost`` counts the elements this touches against those of the optimizer's own step.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch
from torch import nn

from coordcheck.core.frame import COLUMNS, EPS_TENSOR, ROOT_MODULE, conform

__all__ = ["EPS_RATIO", "EPS_TENSOR", "SAMPLE", "EpsProbe", "eps_frame"]

EPS_RATIO = 0.1  # ε counts where ε >= EPS_RATIO * sqrt(v_hat): the coordinate's step is cut by >= 9 %
SAMPLE = 4096  # coordinates read per parameter and step (a strided sample): the fraction to within ~1 % (binomial)


class EpsProbe:
    """Counts, after each update, the sampled coordinates of each Adam-family parameter where ε ≥ ``ratio``·√v̂."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, ratio: float = EPS_RATIO,
                 sample: int = SAMPLE):
        self.optimizer, self.ratio = optimizer, ratio
        names = {id(p): n for n, p in model.named_parameters()}
        self.groups = [g for g in optimizer.param_groups if "betas" in g and "eps" in g]  # Adam-like (not Muon's eps)
        self.params = [(gi, p) for gi, g in enumerate(self.groups) for p in g["params"] if id(p) in names]
        self.names = [names[id(p)] for _, p in self.params]
        # an odd stride walks through every column of a row-major matrix whose row length is a power of two
        self.strides = [max(1, p.numel() // sample) | 1 for _, p in self.params]
        self.sampled = torch.tensor([-(-p.numel() // k) for (_, p), k in zip(self.params, self.strides)],
                                    dtype=torch.float64)
        self.steps: list[int] = []
        self._counts: list[torch.Tensor] = []
        self._index: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def __bool__(self) -> bool:
        return bool(self.params)

    def _indices(self, present: tuple[int, ...], sizes: tuple[int, ...], device: torch.device):
        """For the parameters with state (``sizes``: each one's sampled coordinates here — fewer than
        ``self.sampled`` for a shard): each sampled element's parameter and group, and the missing parameters."""
        if (present, sizes) not in self._index:
            counts = torch.tensor(sizes, dtype=torch.long)
            pidx = torch.tensor(present).repeat_interleave(counts).to(device)
            gidx = torch.tensor([self.params[i][0] for i in present]).repeat_interleave(counts).to(device)
            missing = torch.tensor(sorted(set(range(len(self.params))) - set(present)), dtype=torch.long).to(device)
            self._index[present, sizes] = (pidx, gidx, missing)
        return self._index[present, sizes]

    @torch.no_grad()
    def record(self, step: int) -> None:
        """After ``optimizer.step()``: this step's counts (on the device), for frame step ``step``."""
        xs, present, thr = [], [], {}
        for i, (gi, p) in enumerate(self.params):
            group, state = self.groups[gi], self.optimizer.state.get(p, {})
            v = state.get("max_exp_avg_sq") if group.get("amsgrad") else None
            v = state.get("exp_avg_sq") if v is None else v
            if v is None:  # no update yet (no gradient): NaN
                continue
            if gi not in thr:  # a group's parameters share Adam's step count: thr = (1 - beta2^t) (eps / ratio)^2
                t = state["step"]
                t = t.to(v.device, torch.float64) if torch.is_tensor(t) and t.device != torch.device("cpu") else \
                    float(t)
                thr[gi] = (1 - group["betas"][1] ** t) * (float(group["eps"]) / self.ratio) ** 2
            xs.append(_strided(v, self.strides[i]))  # a strided view: no copy of the whole state
            present.append(i)
        if not xs:
            return
        x = torch.cat(xs)
        pidx, gidx, missing = self._indices(tuple(present), tuple(v.numel() for v in xs), x.device)
        levels = torch.stack([torch.as_tensor(thr.get(g, 0.0), dtype=torch.float64, device=x.device)
                              for g in range(len(self.groups))])
        hit = (x > 0) & (x.double() <= levels[gidx])  # v_hat = 0: the gradient was always zero, the step is 0
        counts = torch.zeros(len(self.params), dtype=torch.float64, device=x.device).index_add_(0, pidx, hit.double())
        if len(missing):
            counts[missing] = float("nan")
        self.steps.append(step)
        self._counts.append(counts)

    def fractions(self) -> np.ndarray:
        """``(steps, parameters)`` fractions, moved to the host in one transfer (sharded parameters, FSDP2: each
        process counted its shard's part of the sample, the counts summed over the processes in one all-reduce)."""
        if not self._counts:
            return np.zeros((0, len(self.names)))
        counts = torch.stack(self._counts)
        if any(_is_dtensor(p) for _, p in self.params):
            import torch.distributed as dist

            dist.all_reduce(counts)
        return (counts.cpu() / self.sampled).numpy()


def _is_dtensor(t: torch.Tensor) -> bool:
    return type(t).__name__ == "DTensor" and hasattr(t, "to_local")


def _strided(v: torch.Tensor, stride: int) -> torch.Tensor:
    """Every ``stride``-th coordinate of ``v`` flattened (a view). A DTensor sharded on its first dimension (FSDP2's
    ``Shard(0)``: process r holds rows ``r·c .. (r+1)·c``, ``c = ceil(rows / processes)``): the coordinates of the
    same global sample that lie in this process's shard, so that the processes' counts add up to one process's."""
    if not _is_dtensor(v):
        return v.reshape(-1)[::stride]
    from torch.distributed.tensor import Shard

    if [type(pl) for pl in v.placements] != [Shard] or v.placements[0].dim != 0:
        return v.full_tensor().reshape(-1)[::stride]  # another layout: the whole state, gathered (then not summed)
    mesh = v.device_mesh
    rows = v.shape[0]
    per = -(-rows // mesh.size())
    start = min(rows, mesh.get_local_rank() * per) * (v.numel() // max(rows, 1))
    return v.to_local().reshape(-1)[(-start) % stride :: stride]


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
