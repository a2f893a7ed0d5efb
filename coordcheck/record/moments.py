"""Moments: one definition of what is reduced on the device and how statistics follow from it.

Stage: measure (shared by both probes, ``coordcheck.record.probes`` and ``coordcheck.gradflow.probe``).
Input: activation tensors on their device. Output: a few float32 moments per tensor (``MOMENTS``,
or the subset a probe needs by name: :func:`needed_moments`; :func:`moments`, or :func:`moment_terms`
for a caller that concatenates those of many tensors at once), moved to the host by the caller,
turned into float64 rows ``[n, mean, var, abssum, absmax]`` (:func:`moment_rows`), pooled across
calls (:func:`pool_moments`, :func:`pool_calls`), and statistics from those rows
(:func:`stats_from_moments`, registry ``STAT_FUNCS``). Nothing here syncs with the host.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import torch

from coordcheck.core.errors import CoordCheckError

__all__ = ["N", "MEAN", "VAR", "ABSSUM", "ABSMAX", "MOMENTS", "NEEDS", "STAT_FUNCS", "needed_moments", "moments",
           "moment_terms", "batched_moments", "moment_rows", "masked_moments", "pool_moments", "pool_calls",
           "pool_ranks", "stats_from_moments"]

# Moments kept per (module, tensor), on the host: n, mean, population variance, sum |x|, max |x|.
N, MEAN, VAR, ABSSUM, ABSMAX = range(5)
# Reduced on the device: a shift c (the first element), sum and sum of squares of x - c, sum |x|, max |x|.
MOMENTS = ("shift", "sum", "sumsq", "abssum", "absmax")
NEEDS = {"std": ("shift", "sum", "sumsq"), "l1": ("abssum",), "rms": ("shift", "sum", "sumsq"),
         "mean": ("shift", "sum"), "absmax": ("absmax",)}


def needed_moments(stats: Sequence[str]) -> tuple[str, ...]:
    """The device moments (in canonical order) that the statistics ``stats`` need."""
    unknown = [s for s in stats if s not in NEEDS]
    if unknown:
        raise CoordCheckError(f"unknown statistic(s) {unknown}: use some of {list(NEEDS)}")
    need = {m for s in stats for m in NEEDS[s]}
    return tuple(m for m in MOMENTS if m in need)


def _std(m: np.ndarray) -> np.ndarray:
    n = m[:, N]
    return np.sqrt(m[:, VAR] * n / np.maximum(n - 1, 1))


# Registry of statistics computed from moments (rows of an (R, 5) float64 array).
STAT_FUNCS = {
    "std": _std,
    "l1": lambda m: m[:, ABSSUM] / m[:, N],
    "rms": lambda m: np.sqrt(m[:, VAR] + m[:, MEAN] ** 2),
    "mean": lambda m: m[:, MEAN],
    "absmax": lambda m: m[:, ABSMAX],
}


def moment_terms(x: torch.Tensor, which: Sequence[str] = MOMENTS, scratch: torch.Tensor | None = None,
                 shaped: torch.Tensor | None = None) -> list[torch.Tensor]:
    """The device moments ``which`` of ``x`` (see ``MOMENTS``) as (1,) float32 tensors on its device; no host sync.

    Sums are taken of ``x - c`` with ``c`` its first element, so a constant tensor has variance
    exactly 0 and large means cancel less (a shifted two-moment pass: one subtraction, a sum and
    a dot; ``torch.var_mean`` is ~20x slower on CPU). Sum |x| and max |x| come from one ``abs``.
    ``scratch``: a flat float32 buffer of ``x.numel()`` elements on ``x``'s device that receives the
    temporaries (``x - c``, then ``|x|``) instead of fresh allocations, which fault their pages in
    on the CPU; it must not hold ``x``. No term is a view of ``x`` (they may be concatenated later,
    after an in-place op changed ``x``), and all are (1,): ``torch.cat`` of many is ~3x faster than
    ``torch.stack`` of 0-d tensors. :func:`moment_rows` turns them into mean and variance on the host.
    ``shaped``: ``scratch`` viewed in ``x``'s shape (a float32 ``x`` only); the temporaries are then written from ``x``
    as it is and the shift read with ``torch.take``, so that no flat view of ``x`` is made (at small widths the
    probes' cost is per op: this is one op fewer per tensor; the values are the same, element for element).
    """
    if (shaped is not None and scratch is not None and x.dtype == torch.float32 and shaped.shape == x.shape
            and shaped.data_ptr() == scratch.data_ptr()):
        f, into = x, shaped  # read x in its own shape, write the flat scratch through its shaped view
        c = torch.take(x, _first_index(x.device)) if "shift" in which else None  # a copy, as narrow_copy's
    else:
        f = x if x.ndim == 1 else x.reshape(-1)
        if f.dtype != torch.float32:
            f = f.float()
        into = scratch
        c = f.narrow_copy(0, 0, 1) if "shift" in which else None  # a copy: x may change in place after the hook
    out = []
    if c is not None:
        d = f - c if scratch is None else (torch.sub(f, c, out=into), scratch)[1]  # d: flat either way
        out += [c, d.sum(0, keepdim=True)] + ([torch.dot(d, d).view(1)] if "sumsq" in which else [])
    if "abssum" in which or "absmax" in which:
        a = f.abs() if scratch is None else (torch.abs(f, out=into), scratch)[1]  # one |x| serves both
        out += [a.sum(0, keepdim=True)] if "abssum" in which else []
        # amax: up to ~3x faster than Tensor.max on the CPU, NaN propagated alike
        out += [torch.amax(a, 0, keepdim=True)] if "absmax" in which else []
    return out


_FIRST: dict[torch.device, torch.Tensor] = {}  # device -> the index tensor [0] (torch.take of the first element)


def _first_index(device: torch.device) -> torch.Tensor:
    index = _FIRST.get(device)
    if index is None:
        index = _FIRST[device] = torch.zeros(1, dtype=torch.long, device=device)
    return index


def moments(x: torch.Tensor, which: Sequence[str] = MOMENTS) -> torch.Tensor:
    """:func:`moment_terms` of ``x`` in one (len(which),) float32 tensor on its device."""
    return torch.cat(moment_terms(x, which))


def batched_moments(flats: Sequence[torch.Tensor], which: Sequence[str] = MOMENTS) -> torch.Tensor:
    """:func:`moments` of many flat float32 tensors at once: (R, len(which)), a fixed number of kernels.

    One ``cat``, one gather of the shifts, and segment reductions over the concatenation, instead
    of a handful of kernels per tensor (the GPU path, where per-tensor kernels are launch-bound).
    Sums of ``x - c`` as in :func:`moments`; each tensor must hold at least one element
    (``unsafe=True``: segment_reduce's own length checks would synchronise with the host).
    """
    flat = torch.cat(list(flats))
    lengths = torch.tensor([f.numel() for f in flats], device=flat.device)
    cols = []
    if "shift" in which:
        c = flat[lengths.cumsum(0) - lengths]
        d = flat - torch.repeat_interleave(c, lengths, output_size=flat.numel())
        cols += [c, torch.segment_reduce(d, "sum", lengths=lengths, unsafe=True)]
        if "sumsq" in which:
            cols.append(torch.segment_reduce(d.square_(), "sum", lengths=lengths, unsafe=True))
        del d
    if "abssum" in which or "absmax" in which:
        a = flat.abs()
        cols += [torch.segment_reduce(a, "sum", lengths=lengths, unsafe=True)] if "abssum" in which else []
        cols += [torch.segment_reduce(a, "max", lengths=lengths, unsafe=True)] if "absmax" in which else []
    return torch.stack(cols, dim=1)


def moment_rows(n: np.ndarray, raw: np.ndarray, which: Sequence[str] = MOMENTS) -> np.ndarray:
    """(R,) counts and (R, len(which)) device moments -> (R, 5) rows ``[n, mean, var, abssum, absmax]``."""
    raw = np.asarray(raw, dtype=np.float64).reshape(len(n), len(which))
    col = {m: raw[:, i] for i, m in enumerate(which)}
    out = np.full((len(n), 5), np.nan)
    out[:, N] = n
    with np.errstate(divide="ignore", invalid="ignore"):
        if "shift" in col:
            out[:, MEAN] = col["shift"] + col["sum"] / out[:, N]
            if "sumsq" in col:
                var = (col["sumsq"] - col["sum"] ** 2 / out[:, N]) / out[:, N]
                out[:, VAR] = np.where(var < 0, 0.0, var)  # rounding can give -eps; NaN stays NaN
    if "abssum" in col:
        out[:, ABSSUM] = col["abssum"]
    if "absmax" in col:
        out[:, ABSMAX] = col["absmax"]
    return out


def masked_moments(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``[n, mean, var, abssum, absmax]`` of the entries of ``x`` where ``keep`` (broadcast) is true.

    For attention logits with masked positions; the count stays on the device (no sync).
    """
    f = x.float()
    k = keep.expand_as(f)
    n = k.sum(dtype=torch.float32)
    z = torch.where(k, f, 0.0)
    mean = z.sum() / n
    var = torch.where(k, (f - mean) ** 2, 0.0).sum() / n
    a = z.abs()
    return torch.stack([n, mean, var, a.sum(), a.max()])


def pool_moments(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Moments (``[n, mean, var, abssum, absmax]``) of the union of two samples (Chan et al.)."""
    n = a[N] + b[N]
    d = b[MEAN] - a[MEAN]
    out = a.copy()
    out[N] = n
    out[MEAN] = a[MEAN] + d * b[N] / n
    out[VAR] = (a[VAR] * a[N] + b[VAR] * b[N] + d * d * a[N] * b[N] / n) / n
    out[ABSSUM] = a[ABSSUM] + b[ABSSUM]
    hi = (a[ABSMAX], b[ABSMAX])
    out[ABSMAX] = np.nan if np.isnan(hi).any() else max(hi)
    return out


def pool_ranks(rows: np.ndarray) -> np.ndarray:
    """(W, R, 5) moments of the same R series over W disjoint samples (one per process) -> (R, 5) moments of their
    union, exactly (the parallel form of :func:`pool_moments`: counts and sums add, the variance takes each sample's
    mean offset, the max is the max; a NaN max stays NaN). A series with the same moments on every process is one
    tensor replicated on each (it does not depend on the batch: a position embedding's output), counted once: its
    count is not multiplied, so its unbiased std is the one-process std."""
    same = (rows == rows[:1]).all(axis=(0, 2))  # (a NaN compares unequal: such a series is pooled as any other)
    rows = np.where(same[None, :, None] & (np.arange(rows.shape[0]) > 0)[:, None, None], 0.0, rows)  # one copy
    n = rows[:, :, N].sum(axis=0)
    out = np.empty(rows.shape[1:], dtype=np.float64)
    out[:, N] = n
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = (rows[:, :, N] * rows[:, :, MEAN]).sum(axis=0) / n
        spread = rows[:, :, N] * (rows[:, :, VAR] + (rows[:, :, MEAN] - mean) ** 2)
        out[:, VAR] = np.where(n > 0, spread.sum(axis=0) / n, np.nan)
    out[:, MEAN] = np.where(n > 0, mean, np.nan)
    out[:, ABSSUM] = rows[:, :, ABSSUM].sum(axis=0)
    hi = rows[:, :, ABSMAX]
    out[:, ABSMAX] = np.where(np.isnan(hi).any(axis=0), np.nan, np.nanmax(np.where(np.isnan(hi), -np.inf, hi), axis=0))
    return out


def stats_from_moments(m: np.ndarray, stats: Sequence[str]) -> np.ndarray:
    """(R, 5) moments -> (R, len(stats)) statistics, float64."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.stack([STAT_FUNCS[s](m) for s in stats], axis=1)


def pool_calls(keys: Sequence[Hashable], raw: np.ndarray) -> tuple[list, np.ndarray]:
    """Rows of ``raw`` (R, 5) with the same key pooled into one (:func:`pool_moments`), keys in first-seen order:
    all calls of a module in one forward are one measurement."""
    if len(set(keys)) == len(keys):
        return list(keys), raw
    index: dict[Hashable, int] = {}
    rows: list[np.ndarray] = []
    for key, row in zip(keys, raw):
        if key in index:
            rows[index[key]] = pool_moments(rows[index[key]], row)
        else:
            index[key] = len(rows)
            rows.append(row.copy())
    return list(index), np.stack(rows)

