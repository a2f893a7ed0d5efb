"""Own update: what a module's own parameters do to its output, apart from what its input brings.

Stage: measure (a companion of :mod:`coordcheck.record.probes`, which attaches it when ``tensors`` holds ``in`` or
``own``). Input: every module that owns parameters directly (``parameters(recurse=False)``, some requiring grad)
and each of its calls (args, kwargs, output) during the probed forward. Output: per call, two more tensors pushed
into the probes' step record under the module's name: ``in`` (its input on the sampled rows) and ``own`` (the
effect of its own parameters, as a gain); the tidy frame documents both (:mod:`coordcheck.core.frame`).

What is measured, on the *sampled rows* ``x_s`` (the first :func:`sampled_rows` entries of the leading dimension
of every tensor argument whose leading size equals the first tensor argument's; the batch is fixed, so the rows
are the same at every width, seed and step):

* step 0: ``f(x_s; θ_0) / s(x_s)`` — the initialisation gain;
* step t ≥ 1: ``(f(x_s; θ_t) - f(x_s; θ_0)) / s(x_s)`` — the change of the output from the module's own update, on
  the input it receives now (``θ_0``: its own parameters, snapshotted on the device at step 0);
* ``s(x) = rms(x)``; ``s = 1`` for normalisation layers (their output does not scale with x), for integer inputs
  (embeddings: an index has no scale) and for an input that is exactly zero. For Adam-family optimizers the gain
  does not move with the scale of x (ΔW does not scale with x, so ΔW·x / rms(x) does not); under SGD ΔW carries the
  input (ΔW ∝ g·xᵀ), so an inflated input inflates the gain (by design: the learning rate then *is* too large for
  that input). For sequence-first models (``(T, B, ...)`` inputs, as ``nn.Transformer``'s) the leading dimension is
  time: the rows are then the first time steps of every sequence — as good a sample for a gain, and a causal module
  sees exactly its own prefix.

Several processes (``torchrun``, :mod:`coordcheck.record.ranks`): the sampled rows are the whole batch's, as one
process takes them. A leading dimension that the batch's split divides holds each process's contiguous share, so the
whole batch's first rows lie on rank 0 (and, with more than 4 processes of few rows each, on the next ranks): only
those processes' samples count (:func:`coordcheck.record.ranks.share_rows`; one that holds none still samples one
row, with no weight, so that every process's record has the same layout). Any other leading dimension (time, in a
sequence-first model) is sampled on every process. ``own`` is then divided by the rms of its input pooled over the
processes, after the gather (:meth:`OwnUpdate.settle`): the ``in`` and ``own`` rows equal one process's up to float
summation order.

How. The extra forwards run inside the module's forward hook, under ``no_grad``, with the probes not recording (so
neither their hooks nor the function probe see them) and with torch functions not dispatched to the function
probe at all. For modules whose output is linear in their own parameters (``Linear``, ``Embedding`` without
``max_norm``, ``LayerNorm``, ``RMSNorm``, ``GroupNorm``, convolutions, ``Bilinear``, mup's ``MuReadout``: the
forwards in ``LINEAR_FORWARDS``) ``f(x; θ_t) - f(x; θ_0) = f(x; θ_t - θ_0)`` exactly: one call on ``θ_t - θ_0``,
which also keeps an unchanged parameter's ``own`` at exactly 0 (no cancellation). Any other module is called twice,
on ``θ_t`` and on ``θ_0``, in eval mode (flags restored: no dropout, no BatchNorm running-statistics update — the
running statistics then normalise the extra calls) with the RNG state saved and restored. The parameters are
passed by putting plain tensors into the module's own ``_parameters`` for the call and putting the Parameters back
after it (in a ``finally``): the Parameters themselves are never written, the attributes set on them (mup's
``infshape``, which ``MuReadout.width_mult()`` reads) are copied onto the tensors, tied weights stay tied in every
other module, and — unlike swapping ``Parameter.data`` in place — autocast's cache of cast weights (keyed on leaf
tensors that require grad) cannot hand the call a cast of the wrong weights. A module whose forward rejects the
sliced input (or whose extra call fails in any way) records neither ``in`` nor ``own`` and logs one warning; the
job goes on. Modules whose output the probes do not record (aliases, identities) get neither; ``Embedding`` with
``max_norm`` (its forward writes its weight) is left out.

Cost per step and module: one call on the sampled rows (two for a module not linear in its parameters), one
subtraction per own parameter (θ_t - θ_0, steps ≥ 1, written into one buffer that every module and step reuse)
and a float32 copy of the sampled input; per step, for all modules together (:meth:`OwnUpdate.flush`, called by the
probes' ``end_step``): the input rms and the moments of every ``in`` and ``own`` — in a fixed number of kernels on a
GPU, per tensor in the probes' reused scratch buffers on the CPU — joined to the probes' one transfer to the host.
Memory: one copy of the recorded modules' parameters (θ_0) and one buffer the size of the largest module's.
``experiments/own_update.py --cost`` counts operators and FLOPs.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from functools import partial

import numpy as np
import torch
from mup import MuReadout
from torch import nn

from coordcheck.core.frame import ROOT_MODULE
from coordcheck.record.layout import is_norm
from coordcheck.record.moments import ABSMAX, ABSSUM, MEAN, VAR, batched_moments, moment_terms
from coordcheck.record.outputs import first_tensor, root_output
from coordcheck.record.ranks import share_rows, world

__all__ = ["SAMPLED_ROWS", "SAMPLED_SHARE", "LINEAR_FORWARDS", "OwnUpdate", "sampled_rows", "sample_rows",
           "leading_size", "owns_parameters"]

log = logging.getLogger(__name__)

# The sampled rows: at most SAMPLED_ROWS entries of the leading dimension and at most 1/SAMPLED_SHARE of it (at
# least one). The default GPT batch (4 x 32 tokens) gives 1 row = 32 tokens (4096 values at width 128); the default
# MLP batch (64) gives 8 rows (1024 values at width 128): the std's sampling error (~1/sqrt(2n) for independent
# values: ~1 % and ~2 %) is small against the 1.41x per width doubling that a width^0.5 trend makes. The share bounds
# the cost: the extra call sees at most a quarter of the tokens (the default GPT: +9.5 % matmul FLOPs per step,
# experiments/own_update.py --cost); one row is the floor.
SAMPLED_ROWS = 8
SAMPLED_SHARE = 4

# Forwards whose output is linear (homogeneous of degree 1) in the module's own parameters.
LINEAR_FORWARDS = frozenset(c.forward for c in (
    nn.Linear, nn.Bilinear, nn.Embedding, nn.LayerNorm, nn.GroupNorm, getattr(nn, "RMSNorm", nn.LayerNorm),
    nn.Conv1d, nn.Conv2d, nn.Conv3d, MuReadout,
))


_EXTRA = [0]  # how many of own's extra calls are running (the weights' gain probe skips them: not the model's forward)


def extra_call() -> bool:
    """Whether a forward hook now runs inside own's extra call of a module (:meth:`OwnUpdate._measure`)."""
    return _EXTRA[0] > 0


def sampled_rows(n: int) -> int:
    """How many of ``n`` leading entries are sampled (see ``SAMPLED_ROWS``)."""
    return max(1, min(SAMPLED_ROWS, n // SAMPLED_SHARE))


def leading_size(args: tuple, kwargs: Mapping) -> int | None:
    """The leading size of the first tensor argument with a leading dimension, or None."""
    first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.ndim), None)
    return None if first is None else first.shape[0]


def sample_rows(args: tuple, kwargs: Mapping, r: int | None = None) -> tuple[tuple, dict] | None:
    """``args`` and ``kwargs`` with every tensor whose leading size equals the first tensor argument's cut to the
    sampled rows (``r``, or :func:`sampled_rows` of that size); None when no argument is a tensor with a leading
    dimension."""
    n = leading_size(args, kwargs)
    if n is None:
        return None
    r = sampled_rows(n) if r is None else r
    cut = lambda a: a[:r] if isinstance(a, torch.Tensor) and a.ndim and a.shape[0] == n else a  # noqa: E731
    return tuple(cut(a) for a in args), {k: cut(v) for k, v in kwargs.items()}


def owns_parameters(module: nn.Module) -> bool:
    """Whether ``module`` gets ``in`` / ``own``: own parameters, some requiring grad, and a forward that does not
    write its weight (``Embedding(max_norm=...)``)."""
    if isinstance(module, nn.Embedding) and module.max_norm is not None:
        return False
    return any(p.requires_grad for p in module.parameters(recurse=False))


def _plain(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t`` carrying the attributes set on the Parameter ``like`` (mup's ``infshape``)."""
    t.__dict__.update(like.__dict__)
    return t


def _first_float(args: tuple, kwargs: Mapping) -> torch.Tensor | None:
    return next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.is_floating_point()), None)


@contextlib.contextmanager
def _parameters(module: nn.Module, values: Mapping[str, torch.Tensor] | None) -> Iterator[None]:
    """The module's own parameters replaced by ``values`` for the duration (None: left as they are)."""
    if not values:
        yield
        return
    saved = {k: module._parameters[k] for k in values}
    module._parameters.update(values)
    try:
        yield
    finally:
        module._parameters.update(saved)


@contextlib.contextmanager
def _quiet(module: nn.Module, linear: bool) -> Iterator[None]:
    """Eval mode (flags restored) and the RNG state restored, for a module whose forward may depend on them."""
    if linear and next(module.children(), None) is None:
        yield  # these forwards use neither the training flag nor the RNG
        return
    flags = [(m, m.training) for m in module.modules()]
    device = next(module.parameters(), torch.empty(0)).device
    devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            module.train(False)
            yield
    finally:
        for m, flag in flags:
            m.training = flag


class OwnUpdate:
    """Forward hooks that measure ``in`` and ``own`` for the probes ``probes`` (see the module docstring); their
    handles join the probes', so ``probes.remove()`` removes them."""

    def __init__(self, probes) -> None:
        self.probes = probes
        self._theta0: dict[str, dict[str, torch.Tensor]] = {}
        self._calls: Counter = Counter()
        self._failed: set[str] = set()
        self._busy = False
        self._delta: dict = {}  # (dtype, device) -> one flat buffer that receives θ_t - θ_0 of one module at a time
        self._delta_views: dict = {}  # (module, parameter) -> its view of that buffer (made once)
        self._ins: list[tuple[str, torch.Tensor]] = []  # this step's (module, flat float32 input) records
        self._owns: list[tuple[str, torch.Tensor, torch.Tensor | None]] = []  # (module, flat change, input to scale by)
        self._ones: dict = {}  # (dtype, device) -> a 0-d 1.0 (_one)
        self._in_rows: list[tuple[str, int]] = []  # the CPU path: (module, elements) and the moment terms, this step
        self._in_terms: list[torch.Tensor] = []
        self._own_rows: list[tuple[str, int]] = []
        self._own_terms: list[torch.Tensor] = []
        # several processes (record.ranks): the rows are the whole batch's first ones, each process holding its share;
        # ``own`` is divided by its input's rms after the processes' moments are pooled (settle), not here
        rank, procs = world()
        self._defer = procs > 1
        self._share = (tuple(probes.batch_shape), rank, procs) if procs > 1 and probes.batch_shape else None
        self._in_meta: list[tuple[int, list[int] | None, bool]] = []  # per in row: rows here, per process, hidden
        self._own_meta: list[tuple[int, list[int] | None, int | None]] = []  # per own row: ..., its input's in row
        self.meta: tuple[list, list] = ([], [])  # the last flush's (in_meta, own_meta)
        for name, module in probes.model.named_modules():
            if owns_parameters(module):
                probes._handles.append(module.register_forward_hook(
                    partial(self._hook, name or ROOT_MODULE), with_kwargs=True))

    def begin_step(self) -> None:
        self._calls = Counter()
        self._ins, self._owns = [], []
        self._in_meta, self._own_meta = [], []
        self._in_rows, self._in_terms, self._own_rows, self._own_terms = [], [], [], []  # the CPU path (_reduce)

    def clear(self) -> None:
        self._theta0.clear()
        self._in_rows, self._in_terms, self._own_rows, self._own_terms = [], [], [], []
        self._delta.clear()
        self._delta_views.clear()
        self._ins, self._owns = [], []

    def _hook(self, name: str, module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        p = self.probes
        if not p.recording or self._busy or name in self._failed:
            return
        call = self._calls[name]
        self._calls[name] += 1
        if p._calls.get(name, 0) <= call:
            return  # the probes recorded no output for this call (an alias, an identity, no floating output)
        n = leading_size(args, kwargs)
        if n is None:
            return
        r, takes = (sampled_rows(n), None) if self._share is None else share_rows(n, *self._share, sampled_rows)
        args, kwargs = sample_rows(args, kwargs, r)
        x = _first_float(args, kwargs)
        change = self._measure(name, module, args, kwargs) if "own" in p.tensors else None
        if change is False:
            return  # the extra call failed (warned): nothing for this module
        scale = change is not None and x is not None and not _is_norm(module)
        keep_in = "in" in p.tensors or (scale and self._defer)  # (deferred: the rms comes from the pooled in row)
        with torch.no_grad(), torch._C.DisableTorchFunction():
            if x is not None and keep_in:
                self._in_meta.append((r, takes, "in" not in p.tensors))
            if change is not None:
                self._own_meta.append((r, takes, len(self._in_meta) - 1 if scale and self._defer else None))
            if not p.batched:  # the CPU: reduced now, in the probes' scratch buffers; nothing kept to the step's end
                self._reduce(name, x if x is not None and (keep_in or scale) else None, change, scale, keep_in)
                return
            if x is not None and (keep_in or scale):  # a float32 copy: the forward may change x in place
                x = x.reshape(-1).to(torch.float32, copy=True)  # (grad is off: no detach needed)
                if keep_in:
                    self._ins.append((name, x))
            if change is not None:
                self._owns.append((name, change.reshape(-1), x if scale and not self._defer else None))

    def _reduce(self, name: str, x: torch.Tensor | None, change: torch.Tensor | None, scale: bool,
                keep_in: bool) -> None:
        """The CPU path: the moments of ``in`` and ``own`` now (per tensor: the CPU's faster path, and no copy of the
        input is kept until :meth:`flush`), the same numbers as reducing their copies there."""
        p = self.probes
        buffer, which = p._buffer, p._which
        if x is not None:
            x = x.reshape(-1)  # flat and contiguous, as the copy the batched path keeps
            if x.dtype != torch.float32:
                x = x.float()
            if keep_in:
                self._in_terms += moment_terms(x, which, *(buffer(0, x) or ()))
                self._in_rows.append((name, x.numel()))
        if change is not None:
            f = change
            if scale and not self._defer:
                rms = x.square().mean().sqrt()
                s = torch.where(rms > 0, rms, self._one(rms))  # all-zero input: no scale, s = 1
                scaled = buffer(1, f)  # (flat, shaped like f): divided into it, in f's own shape (no flat view)
                f = f.reshape(-1) / s if scaled is None else (torch.div(f, s, out=scaled[1]), scaled[0])[1]
            self._own_terms += moment_terms(f, which, *(buffer(0, f) or ()))
            self._own_rows.append((name, f.numel()))

    def _one(self, like: torch.Tensor) -> torch.Tensor:
        """A 0-d 1.0 like ``like`` (dtype, device), made once: ``torch.where``'s scalar costs an op per call."""
        one = self._ones.get((like.dtype, like.device))
        if one is None:
            one = self._ones[like.dtype, like.device] = torch.ones((), dtype=like.dtype, device=like.device)
        return one

    def _measure(self, name: str, module: nn.Module, args: tuple, kwargs: dict) -> torch.Tensor | None | bool:
        """The unscaled ``own`` of this call (float32), None when there is none, False when the extra call failed."""
        p = self.probes
        with torch.no_grad():
            if name not in self._theta0:
                if p.step != 0:
                    return None  # first seen after step 0: no θ_0 to compare with
                self._theta0[name] = {k: _plain(v.detach().clone(), v) for k, v in module._parameters.items()
                                      if v is not None}
            self._busy, recording = True, p.recording
            p.recording = False
            _EXTRA[0] += 1
            try:
                with torch._C.DisableTorchFunction():
                    change = self._change(name, module, args, kwargs)
            except Exception as e:  # never crash the job: this module records nothing
                self._failed.add(name)
                text = str(e).strip().splitlines()
                log.warning("own update: %s (%s) rejected its sampled input (%s: %s): no 'in' / 'own' recorded for "
                            "it", name, type(module).__name__, type(e).__name__, text[0] if text else "")
                return False
            finally:
                self._busy, p.recording = False, recording
                _EXTRA[0] -= 1
        return change if change is not None and change.numel() else None

    def flush(self, which: tuple[str, ...]) -> tuple[list[tuple[str, str]], list[int], torch.Tensor | None]:
        """This step's ``in`` / ``own`` rows: their keys, element counts and device moments ``which`` (R, k), all
        ``in`` rows before all ``own`` rows. Batched (the GPU): reduced here together in a fixed number of kernels
        (:func:`coordcheck.record.moments.batched_moments`), ``own`` divided by the rms of its input here, also in one
        pass
        for all modules; on the CPU reduced in the hooks already (:meth:`_reduce`) and only joined here. Under several
        processes ``own`` is not divided here (:meth:`settle` does it after pooling)."""
        self.meta, self._in_meta, self._own_meta = (self._in_meta, self._own_meta), [], []
        if not self.probes.batched:  # the CPU: reduced in the hooks (_reduce); here only joined, ins before owns
            rows = self._in_rows + self._own_rows
            keys = [(name, "in") for name, _ in self._in_rows] + [(name, "own") for name, _ in self._own_rows]
            terms = self._in_terms + self._own_terms
            self._in_rows, self._in_terms, self._own_rows, self._own_terms = [], [], [], []
            if not rows:
                return [], [], None
            return keys, [n for _, n in rows], torch.cat(terms).reshape(len(rows), -1)
        ins, owns = self._ins, self._owns
        self._ins, self._owns = [], []
        if not ins and not owns:
            return [], [], None
        with torch.no_grad(), torch._C.DisableTorchFunction():
            lengths = [f.numel() for _, f, _ in owns]
            change = torch.cat([f for _, f, _ in owns]) if owns else torch.empty(0)
            xs = [x for _, _, x in owns if x is not None]  # the inputs to scale by (none for norms, integers)
            if xs:
                k, pick, j = len(xs), [], 0
                for _, _, x in owns:  # own i -> the index of its input in xs; k: not scaled (s = 1)
                    pick.append(j if x is not None else k)
                    j += x is not None
                counts = torch.tensor([x.numel() for x in xs] + lengths + pick, device=change.device)  # one copy
                n, own_n, pick = counts[:k], counts[k : k + len(owns)], counts[k + len(owns) :]
                ss = torch.segment_reduce(torch.cat(xs).square(), "sum", lengths=n, unsafe=True)
                rms = (ss / n).sqrt()
                rms = torch.cat([torch.where(rms > 0, rms, 1.0), rms.new_ones(1)])  # all-zero input: no scale, s = 1
                change = change / torch.repeat_interleave(rms[pick], own_n, output_size=change.numel())
            flats = [f for _, f in ins] + list(change.split(lengths))
            block = batched_moments(flats, which)
        keys = [(name, "in") for name, _ in ins] + [(name, "own") for name, _, _ in owns]
        return keys, [f.numel() for f in flats], block

    def held(self, offset: int, rows: int, procs: int) -> np.ndarray:
        """Under ``procs`` processes, for the probes' ``rows`` unmasked rows (the last flush's from ``offset`` on): a
        ``(procs, rows)`` mask of the rows whose sample each process holds (:func:`coordcheck.record.ranks.share_rows`;
        one that holds none of a row's sampled rows still reduced one row, which must not count)."""
        held = np.ones((procs, rows), dtype=bool)
        for i, (_, takes, _) in enumerate([*self.meta[0], *self.meta[1]]):
            if takes is not None:
                held[:, offset + i] = [t > 0 for t in takes]
        return held

    def settle(self, raw: np.ndarray, offset: int) -> list[int]:
        """Under several processes, after pooling (``raw``: the probes' (R, 5) rows, the last flush's from ``offset``
        on): each ``own`` row divided by the rms of its pooled input (1 for an input that is exactly zero), as one
        process divides it; the indices of the ``in`` rows kept only for that (``in`` not asked for), to drop."""
        ins, owns = self.meta
        for i, (_, _, j) in enumerate(owns):
            if j is not None:
                x, row = raw[offset + j], raw[offset + len(ins) + i]
                s = np.sqrt(x[VAR] + x[MEAN] ** 2)
                s = s if s > 0 else 1.0
                row[[MEAN, ABSSUM, ABSMAX]] /= s
                row[VAR] /= s * s
        return [offset + j for j, (_, _, hidden) in enumerate(ins) if hidden]

    def _delta_view(self, name: str, key: str, like: torch.Tensor) -> torch.Tensor:
        """Where ``θ_t - θ_0`` of parameter ``key`` of module ``name`` is written: a view (shaped like ``like``) of one
        buffer per dtype and device, reused by every module and step — the extra call reads it and keeps no reference
        to it, and a fresh tensor per parameter and step would be allocated (and on the CPU page-faulted in) every
        time: 6.6 MiB per forward at GPT width 256. The buffer holds the largest module's parameters side by side."""
        view = self._delta_views.get((name, key))
        if view is not None and view.dtype == like.dtype and view.device == like.device and view.shape == like.shape:
            return view
        slot = (like.dtype, like.device)
        need = lambda ps: sum(v.numel() for v in ps.values() if (v.dtype, v.device) == slot)  # noqa: E731
        buf = self._delta.get(slot)
        if buf is None or buf.numel() < need(self._theta0[name]):  # sized for the largest module snapshotted so far
            n = max(need(ps) for ps in self._theta0.values())
            buf = self._delta[slot] = torch.empty(n, dtype=like.dtype, device=like.device)
            self._delta_views = {k: v for k, v in self._delta_views.items() if (v.dtype, v.device) != slot}
        offset = 0
        for k, v in self._theta0[name].items():  # this module's parameters side by side (one call reads them together)
            if (v.dtype, v.device) == slot:
                self._delta_views[name, k] = buf[offset : offset + v.numel()].view(v.shape)
                offset += v.numel()
        return self._delta_views[name, key]

    def _out(self, name: str, module: nn.Module, args: tuple, kwargs: dict,
             values: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor | None:
        with _parameters(module, values):
            out = module(*args, **kwargs)
        return root_output(out, self.probes.output) if name == ROOT_MODULE else first_tensor(out)

    def _change(self, name: str, module: nn.Module, args: tuple, kwargs: dict) -> torch.Tensor | None:
        """``f(x; θ_0)`` at step 0, ``f(x; θ_t) - f(x; θ_0)`` after (float32), on the sampled ``args``."""
        linear = type(module).forward in LINEAR_FORWARDS
        theta0 = self._theta0[name]
        with _quiet(module, linear):
            if self.probes.step == 0:
                out = self._out(name, module, args, kwargs)
                return None if out is None else out.float()
            if linear:
                delta = {k: _plain(torch.sub(module._parameters[k], v, out=self._delta_view(name, k, v)), v)
                         for k, v in theta0.items()}
                out = self._out(name, module, args, kwargs, delta)
                return None if out is None else out.float()
            now = self._out(name, module, args, kwargs)
            before = self._out(name, module, args, kwargs, theta0)
            if now is None or before is None or now.shape != before.shape:
                return None
            return now.float() - before.float()


def _is_norm(module: nn.Module) -> bool:
    role = getattr(module, "coordcheck_role", None)
    return role == "norm" if role is not None else is_norm(module)
