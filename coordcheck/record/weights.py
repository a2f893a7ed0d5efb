"""Facts measured from the weights: what training did to each parameter, and each matrix module's multiplier.

Stage: measure (beside the probes; in the sweep's loop and in the recorder alike). Input: the model, the optimizers
that train it, and the updates to measure. Output: rows of the tidy frame (``module`` = the parameter's dotted name
for ``weight`` and ``update`` rows, the module's name for ``gain`` rows; ``layer_index``, ``role``, ``call_order``
the owning module's), judged by :mod:`coordcheck.judge.facts`:

* ``weight`` — ``rms`` (per coordinate), ``fro`` (Frobenius norm) and ``spec`` (spectral norm, estimated by power
  iteration) of W, at step 0 and after each measured update;
* ``update`` — the same three of ΔW = W_t − W_{t−1}, the change update t made, measured around the optimizer's own
  step (its step hooks: whatever set the learning rate — a schedule, a loop that multiplies a group key in, a
  wrapper, a closure, a fused kernel — the change is what it is), less a decoupled weight decay's shrink ``lr·λ·W``
  (AdamW's, Muon's: weight decay is judged apart, and a W too large at init would inflate it); beside them the labels
  of that step: ``lr`` (the
  learning rate its group held *during* the step, times Muon's shape adjustment), ``wd`` (its group's weight decay
  coefficient) and ``sgd_lr`` (−⟨ΔW, ∇⟩/‖∇‖², the step taken along the gradient: plain SGD's applied learning rate;
  NaN where the gradient is gone);
* ``gain`` — ``gain``: a module's output over its weight applied to its own input (the least-squares coefficient,
  each output feature centred, on the sampled rows), ``fit``: the share of the output's variance that explains (1
  for ``W x`` times a constant), and ``in_rms``: the rms of that input (a readout's, whose coordinates muP keeps
  Θ(1): a multiplier applied before it shows there). The multiplier wherever the module applies it: a
  ``MuReadout``'s, a unit-scaled op's
  ``1/sqrt(fan_in)``, a ``Linear`` subclass that multiplies its output. At step 0 and after each measured update.

Without an optimizer to hook (``record(model, ...)`` with none) the update is the change between the call before it
and the call after it (:meth:`WeightFacts.settle`); its labels are then NaN.

Memory: one copy of the parameters an optimizer steps, held during that step only (the pre-hook takes it, the
post-hook frees it), or, without an optimizer, between two calls. Cost per measured update: that copy, a few
reductions per parameter and ``POWER_STEPS`` matrix-vector products each way for the spectral norms; per measured
forward, one product of each matrix with a sample of its input (:func:`coordcheck.record.own.sampled_rows`). Nothing
is moved to the host until :meth:`WeightFacts.frame`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from coordcheck.core.frame import COLUMNS, GAIN_TENSOR, UPDATE_TENSOR, WEIGHT_TENSOR, conform
from coordcheck.record.eps import _owner
from coordcheck.record.outputs import first_tensor
from coordcheck.record.own import extra_call, sampled_rows
from coordcheck.record.param_facts import effective_lr, optimizer_family
from coordcheck.record.ranks import world

__all__ = ["WeightFacts", "measured_steps", "WEIGHT_STATS", "UPDATE_STATS", "GAIN_STATS", "POWER_STEPS"]

WEIGHT_STATS = ("rms", "fro", "spec")
UPDATE_STATS = ("rms", "fro", "spec", "lr", "wd", "sgd_lr")
GAIN_STATS = ("gain", "fit", "in_rms")
# Power iterations for a spectral norm: from a fixed start the first time, then from the vector the last call left (W
# and ΔW each their own: successive weights, and successive updates, share their top direction). Each is a pass over
# the matrix (memory-bound on a CPU): at GPT width 1024, 8 + 2 of them per matrix and measured step cost 0.4 s of a
# 2.2 s run (experiments/bench_probes.py, variant g). Power iteration approaches σ_max from below: on a Gaussian
# matrix 6 of them read 6 % low at width 256 and at 1024 alike (an exponent off by < 0.01); on Muon's ΔW, whose
# spectrum is flat, an exponent off by up to 0.02 against torch.linalg.matrix_norm (tests/test_facts.py)
POWER_STEPS = 6
WARM_STEPS = 1
UPDATE_WARM_STEPS = 1
GAIN_ROWS = 16  # the input vectors a gain is fitted on (the first, of the sampled rows): a ratio, to well within 1 %
GAIN_FEATURES = 64  # and the output features: the gain is one number for all of them, and W is read for these alone
_TINY = 1e-30
DECOUPLED = ("adamw", "muon")  # the families whose weight decay shrinks W by lr·λ apart from the gradient's step


def measured_steps(steps: Iterable[int]) -> list[int]:
    """The updates to measure among the recorded steps: 1, 2, 5, 10, 20, 50, 100, ... and the last."""
    steps = sorted(s for s in set(steps) if s >= 1)
    if not steps:
        return []
    marks = {1, 2}
    k = 1
    while k <= steps[-1]:
        marks |= {5 * k, 10 * k, 20 * k}
        k *= 10
    return sorted(s for s in steps if s in marks or s == steps[-1])


def _whole(t: torch.Tensor) -> torch.Tensor:
    """A sharded parameter's (FSDP2's DTensor) whole value, gathered; any other tensor as it is."""
    full = getattr(t, "full_tensor", None)
    return full() if callable(full) else t


def _as_matrix(t: torch.Tensor, conv: bool) -> torch.Tensor:
    """A 2-D view for the spectral norm: a convolution's (out, in·kernel), a stack of matrices (experts x out x in)
    stacked row-wise, a matrix as it is."""
    if t.ndim == 2:
        return t
    return t.reshape(t.shape[0], -1) if conv else t.reshape(-1, t.shape[-1])


def _spectral(a: torch.Tensor, v: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(σ_max estimate, right vector)`` of ``a`` by ``steps`` power iterations from ``v``; on the device."""
    s = torch.zeros((), dtype=a.dtype, device=a.device)
    for _ in range(steps):
        u = a @ v
        u = u / u.norm().clamp_min(_TINY)
        v = a.T @ u
        s = v.norm()
        v = v / s.clamp_min(_TINY)
    return s, v


class _Param:
    """One trained parameter: its name, whether it is a convolution's kernel, its warm power-iteration vector."""

    def __init__(self, name: str, p: torch.Tensor, conv: bool, seed: int):
        self.name, self.p, self.conv = name, p, conv
        self.v: torch.Tensor | None = None  # W's top right singular vector, as the last call left it
        self.dv: torch.Tensor | None = None  # ΔW's
        self.v0: torch.Tensor | None = None
        self.seed = seed
        self.s: dict[bool, torch.Tensor | None] = {True: None, False: None}  # (W, ΔW): the last estimate

    def start(self, cols: int, device: torch.device) -> torch.Tensor:
        if self.v0 is None:
            g = torch.Generator().manual_seed(self.seed)
            v = torch.randn(cols, generator=g, dtype=torch.float32)
            self.v0 = (v / v.norm()).to(device)
        return self.v0


class WeightFacts:
    """The weight, update and gain facts of ``model`` (module docstring). ``optimizers``: those whose steps to hook
    (none: the update is measured between two :meth:`settle` calls); ``steps``: the update numbers to measure."""

    def __init__(self, model: nn.Module, optimizers: Sequence[torch.optim.Optimizer] = (),
                 steps: Iterable[int] = (), batch_shape: tuple | None = None):
        self.model = model
        self.optimizers = [o for o in optimizers if o is not None]
        self.steps = set(steps)
        convs = {id(m.weight) for m in model.modules() if isinstance(m, nn.modules.conv._ConvNd)}
        seen: set[int] = set()
        self.params: list[_Param] = []
        for i, (name, p) in enumerate(model.named_parameters()):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            self.params.append(_Param(name, p, id(p) in convs, seed=1000 + i))
        self._index = {id(q.p): i for i, q in enumerate(self.params)}
        self.next = 1  # the number of the next update
        self._snap: dict[int, torch.Tensor] = {}  # id(param) -> its value before the update being measured
        self._labels: dict[int, tuple[float, float, float]] = {}  # id(param) -> (lr, wd, its decoupled shrink lr·λ)
        self._manual_snap = False
        self.weight_rows: list[tuple[int, torch.Tensor]] = []  # (step, (P, 3)) on the device
        self.update_rows: list[tuple[int, torch.Tensor]] = []  # (step, (P, 6))
        self.gains = GainProbe(model, batch_shape=batch_shape)
        self._handles = []
        for opt in self.optimizers:
            self._handles.append(opt.register_step_pre_hook(self._before))
            self._handles.append(opt.register_step_post_hook(self._after))

    # -- the caller's side ------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Step 0: W at initialisation."""
        self.weight_rows.append((0, self._weights(cold=True)))

    def expect(self, update: int) -> None:
        """The next update is number ``update``: armed when it is one to measure (without an optimizer, W is copied
        now)."""
        self.next = update
        if not self.optimizers and update in self.steps:
            self._snap = {id(q.p): q.p.detach().clone() for q in self.params}
            self._manual_snap = True

    def settle(self) -> None:
        """After an update without an optimizer to hook: its change, measured against the copy :meth:`expect` took."""
        if self._manual_snap:
            self._manual_snap = False
            self._measure(self.next, [q.p for q in self.params])

    def measuring_forward(self, step: int) -> bool:
        """Whether the forward of ``step`` measures the gains (step 0 and the measured updates)."""
        return step == 0 or step in self.steps

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self.gains.remove()
        self._snap = {}

    # -- the optimizer's side ---------------------------------------------------------------------------------------
    def _mine(self, opt: torch.optim.Optimizer) -> list[tuple[torch.Tensor, dict]]:
        return [(p, g) for g in opt.param_groups for p in g["params"] if id(p) in self._index]

    @torch.no_grad()
    def _before(self, opt: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        if self.next not in self.steps:
            return
        for p, g in self._mine(opt):
            if id(p) in self._snap:
                continue
            self._snap[id(p)] = p.detach().clone()
            family = optimizer_family(opt, g)
            lam = float(g.get("weight_decay", 0.0) or 0.0)
            shrink = float(g["lr"]) * lam if family in DECOUPLED else 0.0  # W ← W (1 − lr·λ) before the step
            self._labels[id(p)] = (effective_lr(family, g, p), lam, shrink)

    @torch.no_grad()
    def _after(self, opt: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        mine = [p for p, _ in self._mine(opt) if id(p) in self._snap]
        if mine:
            self._measure(self.next, mine)

    @torch.no_grad()
    def _measure(self, update: int, params: list[torch.Tensor]) -> None:
        """ΔW of ``params`` (their copies in ``_snap``), W after it; the rows of the others NaN (another optimizer's,
        measured when it steps: rows of one update are merged in :meth:`frame`)."""
        nan = float("nan")
        dev = params[0].device if params else torch.device("cpu")
        rows = torch.full((len(self.params), len(UPDATE_STATS)), nan, dtype=torch.float32, device=dev)
        wrows = torch.full((len(self.params), len(WEIGHT_STATS)), nan, dtype=torch.float32, device=dev)
        for p in params:
            i = self._index[id(p)]
            q = self.params[i]
            before = self._snap.pop(id(p))
            w = _whole(p.detach()).float()
            lr, wd, shrink = self._labels.pop(id(p), (nan, nan, 0.0))
            # the optimizer's step, its decoupled weight decay taken out (judged apart): one pass, into the copy
            d = torch.sub(w, _whole(before).float(), alpha=1.0 - shrink, out=before if before.dtype == w.dtype
                          and not hasattr(before, "full_tensor") else None)
            rows[i, :3] = self._three(d, q, warm=False)
            wrows[i] = self._three(w, q, warm=True)
            rows[i, 3], rows[i, 4] = lr, wd
            if p.grad is not None:
                g = _whole(p.grad.detach()).float().reshape(-1)
                gg = torch.dot(g, g)
                rows[i, 5] = torch.where(gg > 0, -torch.dot(d.reshape(-1), g) / gg.clamp_min(_TINY),
                                         torch.full_like(gg, nan))
        self.update_rows.append((update, rows))
        self.weight_rows.append((update, wrows))

    def _weights(self, cold: bool) -> torch.Tensor:
        rows = [self._three(_whole(q.p.detach()).float(), q, warm=not cold) for q in self.params]
        return torch.stack(rows) if rows else torch.zeros((0, len(WEIGHT_STATS)))

    def _three(self, t: torch.Tensor, q: _Param, warm: bool) -> torch.Tensor:
        """``[rms, fro, spec]`` of ``t``: W when ``warm``, else ΔW (each keeps its power-iteration vector for the
        next call)."""
        fro = t.norm()
        rms = fro / max(t.numel(), 1) ** 0.5
        if t.ndim < 2:
            return torch.stack([rms, fro, fro])
        a = _as_matrix(t, q.conv)
        last = q.v if warm else q.dv
        if last is not None and not bool(q.s[warm] > 0):
            last = None  # a zero matrix left a zero vector (a zero-initialised readout's W, an update behind it at
            # step 1, a frozen step): start again (one transfer per matrix and measured step)
        if last is not None and last.shape[0] == a.shape[1]:
            s, v = _spectral(a, last, WARM_STEPS if warm else UPDATE_WARM_STEPS)
        else:
            s, v = _spectral(a, q.start(a.shape[1], a.device), POWER_STEPS)
        if warm:
            q.v = v
        else:
            q.dv = v
        q.s[warm] = s
        return torch.stack([rms, fro, s])

    # -- the frame --------------------------------------------------------------------------------------------------
    def frame(self, layout: Mapping[str, tuple[int, str, int]], identity: Mapping[str, object]) -> pd.DataFrame:
        """The facts as tidy rows (one transfer to the host); ``identity``: the identity columns."""
        names = [q.name for q in self.params]
        parts = [_rows(self.weight_rows, names, WEIGHT_TENSOR, WEIGHT_STATS),
                 _rows(self.update_rows, names, UPDATE_TENSOR, UPDATE_STATS),
                 self.gains.rows()]
        df = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else \
            pd.DataFrame(columns=["step", "module", "tensor", "stat", "value"])
        df = df.dropna(subset=["value"])
        keys = list(zip(df["module"], df["tensor"] == GAIN_TENSOR))
        owners = {k: _owner_of(k[0], layout, k[1]) for k in set(keys)}
        lay = [owners[k] for k in keys]
        df["layer_index"] = [o[0] for o in lay]
        df["role"] = [o[1] for o in lay]
        df["call_order"] = [o[2] for o in lay]
        df["head_dim"] = 0
        for col, val in identity.items():
            df[col] = val
        return conform(df[list(COLUMNS)])


def _owner_of(name: str, layout: Mapping[str, tuple[int, str, int]], module: bool) -> tuple[int, str, int]:
    if module and name in layout:
        return layout[name]
    return _owner(name if not module else f"{name}.weight", dict(layout))


def _rows(rows: list[tuple[int, torch.Tensor]], names: list[str], tensor: str, stats: Sequence[str]) -> pd.DataFrame:
    """``[(step, (P, S))]`` -> long rows; several records of one step (one per optimizer) merged (NaN-aware)."""
    if not rows or not names:
        return pd.DataFrame(columns=["step", "module", "tensor", "stat", "value"])
    values = torch.stack([r for _, r in rows]).cpu().numpy().astype(float)  # (R, P, S): one transfer
    steps = [s for s, _ in rows]
    merged: dict[int, np.ndarray] = {}
    for s, v in zip(steps, values):
        merged[s] = v if s not in merged else np.where(np.isnan(merged[s]), v, merged[s])
    k, p = len(stats), len(names)
    order = sorted(merged)
    arr = np.stack([merged[s] for s in order])  # (T, P, S)
    return pd.DataFrame({
        "step": np.repeat(order, p * k),
        "module": np.tile(np.repeat(names, k), len(order)),
        "tensor": tensor,
        "stat": np.tile(list(stats), p * len(order)),
        "value": arr.reshape(-1),
    })


class GainProbe:
    """Forward hooks on every module that owns a matrix ``weight`` (``Linear``-like, ``(out, in)``; GPT-2's
    ``Conv1D``, ``(in, out)``; ``Embedding``): while :attr:`recording`, the sums that give its output's least-squares
    coefficient on ``weight`` applied to its own input (:mod:`coordcheck.record.weights`), over the sampled rows."""

    def __init__(self, model: nn.Module, batch_shape: tuple | None = None):
        self.recording = False
        self.step = 0
        self.batch_shape = batch_shape
        self.names: list[str] = []
        self._sums: dict[str, torch.Tensor] = {}
        self.records: list[tuple[int, dict[str, torch.Tensor]]] = []
        self._handles = []
        for name, module in model.named_modules():
            w = getattr(module, "weight", None)
            if isinstance(w, nn.Parameter) and w.ndim == 2 and w.requires_grad:
                self.names.append(name or "(root)")
                self._handles.append(module.register_forward_hook(self._hook(name or "(root)"), with_kwargs=True))

    def begin(self, step: int, on: bool) -> None:
        self.step, self.recording, self._sums = step, on, {}

    def end(self) -> None:
        if self.recording and self._sums:
            self.records.append((self.step, self._sums))
        self.recording, self._sums = False, {}

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _hook(self, name: str):
        def hook(module: nn.Module, args: tuple, kwargs: dict, out: object) -> None:
            if not self.recording or extra_call() or not isinstance(getattr(module, "weight", None), nn.Parameter):
                return  # (an extra call of the own update's: not the model's forward)
            with torch.no_grad(), torch._C.DisableTorchFunction():  # our ops are not the function probe's to see
                s = _gain_sums(module, args, kwargs, out, self.batch_shape)
            if s is not None:
                self._sums[name] = s if name not in self._sums else self._sums[name] + s
        return hook

    def rows(self) -> pd.DataFrame:
        procs = world()[1]
        if not self.records and procs == 1:
            return pd.DataFrame(columns=["step", "module", "tensor", "stat", "value"])
        keys = [(step, name) for step, sums in self.records for name in sums]
        sums = torch.stack([s for _, d in self.records for s in d.values()]).double() if keys else \
            torch.zeros(0, 6 + 2 * GAIN_FEATURES, dtype=torch.float64, device=_collective_device())
        if procs > 1:  # the processes' sums added, by key: a module some process did not call (a routed
            import torch.distributed as dist  # expert that got no tokens there) adds nothing from it

            from coordcheck.record.ranks import gather_objects

            every = list(dict.fromkeys(k for ks in gather_objects(keys) for k in ks))
            at = {k: i for i, k in enumerate(every)}
            dense = torch.zeros(len(every), sums.shape[1], dtype=sums.dtype, device=sums.device)
            dense[[at[k] for k in keys]] = sums
            dist.all_reduce(dense)
            keys, sums = every, dense
            if not keys:
                return pd.DataFrame(columns=["step", "module", "tensor", "stat", "value"])
        t = sums.cpu().numpy()
        syz, szz, syy, xx, nx, rows = t[:, :6].T
        sy, sz = t[:, 6:6 + GAIN_FEATURES], t[:, 6 + GAIN_FEATURES:]
        with np.errstate(divide="ignore", invalid="ignore"):  # each output feature centred over the pooled rows
            syz = syz - np.where(rows > 0, (sy * sz).sum(1) / rows, 0.0)
            szz = szz - np.where(rows > 0, (sz * sz).sum(1) / rows, 0.0)
            syy = syy - np.where(rows > 0, (sy * sy).sum(1) / rows, 0.0)
            gain = np.where(szz > 0, syz / szz, np.nan)
            fit = np.where((szz > 0) & (syy > 0), syz * syz / (szz * syy), np.nan)
            rms = np.where(nx > 0, np.sqrt(xx / nx), np.nan)
        k, n = len(GAIN_STATS), len(keys)
        return pd.DataFrame({
            "step": np.repeat([k[0] for k in keys], k),
            "module": np.repeat([k[1] for k in keys], k),
            "tensor": GAIN_TENSOR,
            "stat": list(GAIN_STATS) * n,
            "value": np.stack([gain, fit, rms], axis=1).reshape(-1),
        })


def _collective_device() -> torch.device:
    """Where this process's collectives run: its CUDA device under NCCL, else the CPU."""
    import torch.distributed as dist

    nccl = dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl"
    return torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")


def _first_vectors(grid: tuple[int, ...], batch_shape: Sequence[int] | None) -> torch.Tensor:
    """Which of the input vectors here (``grid``: their leading dimensions) are among the whole batch's first
    :data:`GAIN_ROWS` of its sampled rows (:func:`~coordcheck.record.own.sampled_rows` of the leading dimension), as
    flat indices in order. One process: the first ones. Several (:mod:`coordcheck.record.ranks`): the batch is split
    along the leading dimension (this process holds its contiguous share: rank order is the whole batch's) or, a
    sequence-first input, along the dimension as long as this process's batch; each vector's index in the whole
    batch's order says whether it is one."""
    if not len(grid):
        return torch.arange(1)
    n = int(np.prod(grid))
    per_row = n // max(grid[0], 1)
    rank, procs = world()
    if procs == 1 or not batch_shape:
        return torch.arange(min(GAIN_ROWS, sampled_rows(grid[0]) * per_row, n))
    bs = tuple(batch_shape)
    if grid[0] in {bs[0] * int(np.prod(bs[1:j])) for j in range(1, len(bs) + 1)}:  # the leading dimension split
        limit = min(GAIN_ROWS, sampled_rows(grid[0] * procs) * per_row)
        return torch.arange(max(0, min(limit - rank * n, n)))
    j = next((d for d in range(1, len(grid)) if grid[d] == bs[0]), None)
    if j is None:  # no dimension holds the batch's split: rank 0's first vectors stand for the whole batch's
        return torch.arange(min(GAIN_ROWS, sampled_rows(grid[0]) * per_row, n) if rank == 0 else 0)
    whole = list(grid)
    whole[j] *= procs
    flat = torch.zeros(n, dtype=torch.long)
    for d, c in enumerate(torch.unravel_index(torch.arange(n), tuple(grid))):
        flat = flat * whole[d] + c + (rank * grid[j] if d == j else 0)
    limit = min(GAIN_ROWS, sampled_rows(grid[0]) * per_row * procs)
    return torch.nonzero(flat < limit).flatten()


def _gain_sums(module: nn.Module, args: tuple, kwargs: dict, out: object,
               batch_shape: Sequence[int] | None = None) -> torch.Tensor | None:
    """``[Σ y·z, Σ z², Σ y², Σ x², n_x, rows, Σ y (per output feature), Σ z (per output feature)]`` (float64; the
    features padded to :data:`GAIN_FEATURES`) over the whole batch's first :data:`GAIN_ROWS` input vectors of the
    sampled rows that lie here (y, z: the output and ``weight`` applied to the input): sums that several processes
    add up to one process's, each feature centred after (:meth:`GainProbe.rows`). None where the module's output is
    not shaped as its weight applied to its input."""
    x = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
    y = first_tensor(out)
    if x is None or y is None or x.ndim == 0 or y.ndim == 0 or x.shape[0] != y.shape[0]:
        return None
    w = _whole(module.weight.detach())
    floating = x.is_floating_point()
    grid = tuple(x.shape[:-1] if floating else x.shape)
    if tuple(y.shape[:-1]) != grid:
        return None
    take = _first_vectors(grid, batch_shape)
    rows = int(take[-1]) // max(int(np.prod(grid[1:])), 1) + 1 if len(take) else 1  # the leading rows they lie in
    take = take.to(x.device)
    xs = (x[:rows].reshape(-1, x.shape[-1]) if floating else x[:rows].reshape(-1))[take]
    ys = y[:rows].reshape(-1, y.shape[-1])[take].double()
    k = min(GAIN_FEATURES, ys.shape[-1])
    if not floating:
        if w.shape[1] != ys.shape[-1]:
            return None
        z = F.embedding(xs, w[:, :k].double())
    else:
        ys_k = ys[:, :k]
        zs = []  # ``(out, in)`` as nn.Linear stores it (the first k output features: k rows of W read, not all), or
        if xs.shape[-1] == w.shape[1] and ys.shape[-1] == w.shape[0]:  # ``(in, out)`` as GPT-2's Conv1D does
            zs.append(F.linear(xs.double(), w[:k].double()))
        if xs.shape[-1] == w.shape[0] and ys.shape[-1] == w.shape[1] and not isinstance(module, nn.Linear):
            zs.append(xs.double() @ w[:, :k].double())
        if not zs:
            return None
        # a square weight of a module that is not nn.Linear: the layout whose product its output follows
        z = max(zs, key=lambda z: float((ys_k * z).sum() ** 2
                                        / ((z * z).sum() * (ys_k * ys_k).sum()).clamp_min(1e-300)))
    ys = ys[:, :k]
    if z.shape != ys.shape:
        return None
    pad = GAIN_FEATURES - k
    if floating:
        xx, nx = xs.double().square().sum(), float(xs.numel())
    else:
        xx, nx = torch.zeros((), dtype=torch.float64, device=z.device), 0.0
    head = torch.stack([(ys * z).sum(), (z * z).sum(), (ys * ys).sum(), xx, torch.full_like(xx, nx),
                        torch.full_like(xx, float(ys.shape[0]))])
    return torch.cat([head, F.pad(ys.sum(0), (0, pad)), F.pad(z.sum(0), (0, pad))])
