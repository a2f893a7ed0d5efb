"""Statistics of a model trained by several processes (``torchrun``: DDP, FSDP2): each process's packed step, gathered.

Stage: record (called once per step by :meth:`coordcheck.record.probes.Probes.end_step`). Input: the step's packed
buffer on this process's device (every moment, count and the loss, in the same order on every process: the model, the
forward and the probes are the same). Output: a ``(processes, length)`` float64 array on the host — one row per
process, in rank order — from **one** collective per step (``all_gather`` of the packed buffer), never one per module.
The probes then pool the rows exactly (:func:`coordcheck.record.moments.pool_ranks`: counts and sums add, variances
take each process's mean offset, maxima take the max), add the expert counts, and average the losses (each process
holds an equal share of the batch). Without an initialised process group, or with one process, the buffer is only
moved to the host.

Bytes per step: ``processes x length x 4`` gathered, ``length = R x k + M x 5 + C + 1`` float32 values (``R``
unmasked series of ``k`` device moments each, ``M`` masked ones of 5, ``C`` expert counts, the loss).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["gather_ranks", "world"]


def world() -> tuple[int, int]:
    """``(rank, processes)`` of the initialised default process group, else ``(0, 1)``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_ranks(flat: torch.Tensor) -> np.ndarray:
    """Every process's ``flat`` (the same length on each), as a ``(processes, length)`` float64 host array."""
    _, size = world()
    if size == 1:
        return flat.detach().cpu().double().numpy()[None]
    import torch.distributed as dist

    flat = flat.detach().contiguous()
    out = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(out, flat)
    return torch.stack(out).cpu().double().numpy()
