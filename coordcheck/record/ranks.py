"""Statistics of a model trained by several processes (``torchrun``: DDP, FSDP2): each process's packed step, gathered.

Stage: record (called once per step by :meth:`coordcheck.record.probes.Probes.end_step`: :func:`pool_step`). Input:
the step's packed buffer on this process's device (every moment, each series' count and the loss). Output: the step's
moments pooled over the processes, from **one** collective per step (:class:`StepGather`: an ``all_gather`` of the
padded buffer behind a header), never one per module. The rows are pooled exactly
(:func:`coordcheck.record.moments.pool_ranks`: counts and sums add, variances take each process's mean offset, maxima
take the max), the expert counts added, the losses averaged (each process holds an equal share of the batch). A step
whose series differ between the processes (a routed expert not called on some) is gathered as objects and pooled by
key (:func:`pool_by_key`); step 0's names are merged over the processes (:func:`merge_first_seen`). Without an
initialised process group, or with one process, the buffer is only moved to the host.

The ``in`` / ``own`` rows (:mod:`coordcheck.record.own`) are the whole batch's: :func:`share_rows` says which of them
each process holds, so that the pooled sample is the one a single process takes.

Bytes per step: ``processes x (3 + L + L // 8 + 16) x 4`` gathered, ``L = R x (k + 1) + M x 5 + C + 1`` float32
values (``R`` unmasked series of ``k`` device moments and a count each — a count can differ by process: a routed
expert's tokens —, ``M`` masked ones of 5, ``C`` expert counts, the loss; a 3-value header; padding by an eighth).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Hashable, Sequence

import numpy as np
import torch

from coordcheck.record.moments import MOMENTS, moment_rows, pool_ranks

__all__ = ["StepGather", "gather_objects", "layout_key", "merge_first_seen", "pool_by_key", "pool_step", "share_rows",
           "world"]


def world() -> tuple[int, int]:
    """``(rank, processes)`` of the initialised default process group, else ``(0, 1)``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def layout_key(*names: Sequence[Hashable]) -> int:
    """A checksum of a step's series (the same on every process when they recorded the same ones; Python's ``hash``
    of a string differs between processes)."""
    return zlib.crc32(repr(names).encode())


class StepGather:
    """Every process's packed step buffer, in **one** collective per step: each process's buffer padded to a
    capacity all of them know, behind a header (its length and :func:`layout_key`, in float32-exact 16-bit parts).
    The headers tell whether every process recorded the same series; when they did not (a routed expert that got no
    tokens on some process is not called there), or a buffer outgrew the capacity, the call returns None — then
    :func:`gather_objects` and :func:`pool_by_key` — and the capacity grows. The first step gathers the headers
    first (the capacity is unknown): the longest buffer and an eighth, padded with zeros."""

    HEAD = 3

    def __init__(self) -> None:
        self.capacity = 0

    def __call__(self, flat: torch.Tensor, layout: int = 0) -> np.ndarray | None:
        """``(processes, length)`` float64 on the host, or None (see the class)."""
        _, size = world()
        if size == 1:
            return flat.detach().cpu().double().numpy()[None]
        import torch.distributed as dist

        n = flat.numel()
        head = torch.tensor([n, layout >> 16, layout & 0xFFFF], dtype=torch.float32).to(flat.device)
        if not self.capacity:  # the first step: every process's header, then the capacity
            heads = [torch.empty_like(head) for _ in range(size)]
            dist.all_gather(heads, head)
            heads = torch.stack(heads).cpu().numpy()
            self.capacity = self._room(int(heads[:, 0].max()))
            if not (heads == heads[:1]).all():
                return None
            out = [torch.empty_like(flat) for _ in range(size)]
            dist.all_gather(out, flat.detach().contiguous())
            return torch.stack(out).cpu().double().numpy()
        body = flat.detach() if n <= self.capacity else flat.new_zeros(0)  # too long: the header says so, no data
        buf = torch.cat([head, body, flat.new_zeros(self.capacity - body.numel())])
        out = [torch.empty_like(buf) for _ in range(size)]
        dist.all_gather(out, buf)
        host = torch.stack(out).cpu().double().numpy()
        heads = host[:, : self.HEAD]
        if not (heads == heads[:1]).all() or n > self.capacity:
            self.capacity = max(self.capacity, self._room(int(heads[:, 0].max())))
            return None
        return host[:, self.HEAD : self.HEAD + n]

    @staticmethod
    def _room(longest: int) -> int:
        """The capacity for buffers of up to ``longest`` values: an eighth more (a routed expert's rows come and go)."""
        return longest + longest // 8 + 16


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


def gather_objects(obj: object) -> list:
    """Every process's ``obj`` (picklable), in rank order: the slow path, for a step whose series differ."""
    import torch.distributed as dist

    out = [None] * world()[1]
    dist.all_gather_object(out, obj)
    return out


def pool_by_key(records: Sequence[tuple[Sequence[Hashable], np.ndarray]]) -> tuple[list, np.ndarray]:
    """Each process's ``(keys, (R, 5) moments)`` pooled by key and call (keys in first-seen order, rank 0's first; a
    key a process recorded twice, a module called twice, stays two rows): a series that some process did not record
    is pooled over those that did, exactly as :func:`pool_ranks` pools (a series recorded the same on every process
    is counted once)."""
    order: dict[tuple[Hashable, int], list[np.ndarray]] = {}  # (key, its call on a process) -> one row a process
    for keys, rows in records:
        calls: dict[Hashable, int] = {}
        for key, row in zip(keys, rows):
            calls[key] = calls.get(key, -1) + 1  # a module called twice in a forward: two rows (pool_calls joins them)
            order.setdefault((key, calls[key]), []).append(row)
    if not order:
        return [], np.empty((0, 5))
    procs = len(records)
    out = [pool_ranks(np.concatenate([np.stack(rows), np.zeros((procs - len(rows), 5))])[:, None, :])[0]
           for rows in order.values()]  # (a process without the row: zeros, no weight)
    return [key for key, _ in order], np.stack(out)


def pool_step(parts: list[torch.Tensor], loss: torch.Tensor, keys: list, n: Sequence[int], which: Sequence[str],
              loads: list[str], sizes: list[int], gather: StepGather, own=None,
              own_at: int = 0) -> tuple[list, np.ndarray, list, float]:
    """A step's record, pooled over the processes: ``(keys, (R + M, 5) moments, each router's expert counts, the
    loss)``. ``parts``: the step's device tensors (``R`` unmasked rows of ``len(which)`` device moments, ``M`` masked
    rows of 5, the expert counts of ``loads`` — ``sizes`` each); ``keys``: the unmasked then the masked rows' keys;
    ``n``: the unmasked rows' element counts here; ``own``: the probes' :class:`coordcheck.record.own.OwnUpdate` when
    its ``in`` / ``own`` rows are the rows from ``own_at`` on; ``gather``: the probes' :class:`StepGather`. One
    process: the buffer moved to the host. Several: the counts join the buffer, one gather, pooled exactly (a
    process that holds none of an ``in`` / ``own`` row's sample gives it no weight; ``own`` divided by its pooled
    input's rms) — or, when the processes recorded different series this step, gathered as objects and pooled by
    key."""
    rank, procs = world()
    r, nc, rc = len(n), sum(sizes), len(n) if procs > 1 else 0
    if rc:  # each unmasked row's count (float32: exact to 2^24 elements, within 6e-8 above)
        parts = [*parts, torch.tensor(n, dtype=torch.float32).to(loss.device, non_blocking=True)]
    flat = torch.cat([*parts, loss.detach().float().reshape(1)])
    host = gather(flat, layout_key(keys, loads, sizes) if rc else 0)  # the step's one transfer to the host
    if host is None:  # different series (a routed expert not called on some process): by key, each finishing its own
        h = flat.cpu().double().numpy()
        keys, rows, counts = _rows(h[None], keys, np.asarray(n, dtype=np.float64)[None], which, r, rc, nc, sizes)
        if own is not None:
            rows[0][:r][~own.held(own_at, r, procs)[rank]] = 0.0
            keys, rows[0] = _drop(keys, rows[0], own.settle(rows[0], own_at))  # (its own input's rms: one process's)
        every = gather_objects((keys, rows[0], dict(zip(loads, counts[0])), float(h[-1])))
        keys, raw = pool_by_key([(ks, rs) for ks, rs, _, _ in every])
        return keys, raw, [sum(m[name] for _, _, m, _ in every if name in m) for name in loads], \
            float(np.mean([loss for *_, loss in every]))
    counts_n = host[:, host.shape[1] - 1 - rc : -1] if rc else np.asarray(n, dtype=np.float64)[None]
    keys, rows, counts = _rows(host, keys, counts_n, which, r, rc, nc, sizes)
    if own is not None and procs > 1:  # a process that holds none of a row's sample: no weight
        held = own.held(own_at, r, procs)
        for q in range(procs):
            rows[q][:r][~held[q]] = 0.0
    raw = rows[0] if procs == 1 else pool_ranks(np.stack(rows))  # exact over the processes
    if own is not None and procs > 1:  # own divided by its pooled input's rms; in rows kept only for that dropped
        keys, raw = _drop(keys, raw, own.settle(raw, own_at))
    counts = [np.sum([c[i] for c in counts], axis=0) for i in range(len(loads))]
    return keys, raw, counts, float(host[:, -1].mean())  # (each process's loss: the mean over an equal share)


def _rows(host: np.ndarray, keys: list, n: np.ndarray, which: Sequence[str], r: int, rc: int, nc: int,
          sizes: list[int]) -> tuple[list, list[np.ndarray], list[list[np.ndarray]]]:
    """Each process's buffer (a row of ``host``) as its (R + M, 5) moments and its expert counts."""
    k, end = len(which), host.shape[1] - 1
    rows = [np.concatenate([moment_rows(n[q if len(n) > 1 else 0], h[: r * k], which),
                            h[r * k : end - rc - nc].reshape(-1, len(MOMENTS))]) for q, h in enumerate(host)]
    counts = [np.split(h[end - rc - nc : end - rc], np.cumsum(sizes)[:-1]) if sizes else [] for h in host]
    return keys, rows, counts


def _drop(keys: list, raw: np.ndarray, drop: list[int]) -> tuple[list, np.ndarray]:
    """``keys`` and ``raw`` without the rows ``drop``."""
    if not drop:
        return keys, raw
    keep = np.setdiff1d(np.arange(len(keys)), drop)
    return [keys[i] for i in keep], raw[keep]


def merge_first_seen(fired: list[str], shapes: dict[str, list[int]]) -> tuple[list[str], dict[str, list[int]]]:
    """Step 0's recorded names in first-record order and their output shapes, as every process saw them: rank 0's
    order, each name only another process recorded (a routed expert that got tokens there only) placed after the
    name it followed there — the order one process on the whole batch records them in."""
    every = gather_objects((fired, shapes))
    order = list(every[0][0])
    for names, _ in every[1:]:
        for i, name in enumerate(names):
            if name not in order:
                at = order.index(names[i - 1]) + 1 if i and names[i - 1] in order else 0
                order.insert(at, name)
    merged: dict[str, list[int]] = {}
    for _, seen in reversed(every):
        merged.update(seen)  # (rank 0's shape last: it wins)
    return order, merged
