"""Statistics of a model trained by several processes (``torchrun``: DDP, FSDP2): each process's packed step, gathered.

Stage: record (called once per step by :meth:`coordcheck.record.probes.Probes.end_step`). Input: the step's packed
buffer on this process's device (every moment, count and the loss, in the same order on every process: the model, the
forward and the probes are the same). Output: a ``(processes, length)`` float64 array on the host — one row per
process, in rank order — from **one** collective per step (``all_gather`` of the packed buffer), never one per module.
The probes then pool the rows exactly (:func:`coordcheck.record.moments.pool_ranks`: counts and sums add, variances
take each process's mean offset, maxima take the max), add the expert counts, and average the losses (each process
holds an equal share of the batch). Without an initialised process group, or with one process, the buffer is only
moved to the host.

The ``in`` / ``own`` rows (:mod:`coordcheck.record.own`) are the whole batch's: :func:`share_rows` says which of them
each process holds, so that the pooled sample is the one a single process takes.

Bytes per step: ``processes x length x 4`` gathered, ``length = R x k + M x 5 + C + 1`` float32 values (``R``
unmasked series of ``k`` device moments each, ``M`` masked ones of 5, ``C`` expert counts, the loss).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

__all__ = ["gather_ranks", "share_rows", "world"]


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


def share_rows(n: int, batch_shape: tuple[int, ...], rank: int, procs: int,
               rows: Callable[[int], int]) -> tuple[int, list[int]]:
    """The sampled rows of a leading dimension of ``n`` entries here, under ``procs`` processes: ``(rows this process
    samples, rows each process contributes in rank order)``. ``rows(n)``: how many of ``n`` a single process samples.

    A leading dimension that the batch's split divides (``n`` is this process's batch rows ``batch_shape[0]``, or
    its tokens ``batch_shape[0] x batch_shape[1] x ...`` flattened) holds this process's contiguous share of the
    whole batch's ``n x procs`` entries: the first ``rows(n x procs)`` of those are sampled, on the first processes
    (usually rank 0 alone). Any other leading dimension (positions, the time axis of a sequence-first model) is not
    split: every process samples its own first ``rows(n)``, and their union is the whole batch's. A process that
    contributes nothing still samples one row (its record keeps the same layout as every other's; the pooling
    gives that row no weight)."""
    split = {batch_shape[0] * math.prod(batch_shape[1:j]) for j in range(1, len(batch_shape) + 1)}
    if procs == 1 or n not in split:
        return rows(n), [rows(n)] * procs
    r = rows(n * procs)
    takes = [min(n, max(0, r - q * n)) for q in range(procs)]
    return max(takes[rank], 1), takes
