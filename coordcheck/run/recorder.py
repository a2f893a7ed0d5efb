"""A recorder for any training loop: ``coordcheck.record(model, width=..., out=...)``.

Stage: train (the user's loop in place of coordcheck's own). Input: the user's model (a DDP wrapper's module or an
FSDP2-sharded one too) and optimizer, in their own loop, with its schedule, accumulation, clipping, autocast and
processes. Output: one job directory in a sweep's layout (``frame.parquet``, ``job.json``), written atomically when
the ``with`` block ends; ``python -m coordcheck.report runs/w256 runs/w512 ...`` judges several of them as one sweep.

How. On entering, a probe forward of the fixed probe batch records step 0 (the initialisation); after each update
the user calls ``rec.step()``, and at the steps to record another probe forward records that step, and Adam's ε
share. Each probe forward is :mod:`coordcheck.record.probes`' forward of coord_check's own loop, run under
``no_grad``, in the model's own train/eval mode, with the RNG seeded to :data:`PROBE_SEED` (a model with dropout
draws the same masks at every probe, so ``delta`` measures the weights' change, not the masks') and the user's RNG
state saved and restored around it (their dropout and data order are not moved): so a loop without dropout that
trains on the probe batch itself gives coord_check's frame. After the
last step to record the hooks are gone; later ``rec.step()`` calls only count. Under ``torchrun`` every process
calls ``rec.step()`` (FSDP2's forward gathers its shards), each forwards its contiguous share of the probe batch,
the moments are reduced exactly across processes (:mod:`coordcheck.record.ranks`), and only rank 0 writes.

The probe batch is the same at every width: by default the one a sweep reads off the model
(:func:`coordcheck.setup.data.batch_for`), else ``batch=(inputs, targets)``; its hash goes into ``job.json``, and
the report refuses runs recorded on different batches. ``**facts`` go into ``job.json`` too; a few name what the
run is (the same at every width: ``parametrization``, ``lr``, ``model``, ``seed``) and three how the probe forward
calls the model (``loss``, ``output``, ``forward_targets``: the sweep's keys of the same names).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from coordcheck.core.errors import CoordCheckError
from coordcheck.core.frame import FRAME_NAME, STATS, TENSORS, digest, write_frame
from coordcheck.core.text import write_json
from coordcheck.record.eps import EPS_TENSOR, EpsProbe, eps_frame
from coordcheck.record.param_facts import param_facts
from coordcheck.record.probes import Probes, StepRecord
from coordcheck.record.ranks import world
from coordcheck.record.weights import WeightFacts, measured_steps
from coordcheck.record.shapes import n_params, param_shapes, tied_names
from coordcheck.run.sweep import JOB_NAME
from coordcheck.run.train import RunIdentity, cross_entropy, forward_loss, to_frame
from coordcheck.setup.data import Batch, as_batch, batch_for
from coordcheck.setup.device import environment

__all__ = ["Recorder", "record", "RECORD_TENSORS", "RECORD_STEPS", "PROBE_NAME", "PROBE_SEED"]

log = logging.getLogger(__name__)

RECORD_TENSORS = ("out", "delta", "in", "own", EPS_TENSOR)  # a recorder cannot run again for the causes: all of them
RECORD_STEPS = 10  # the sweep's default (conf/config.yaml: steps)
PROBE_NAME = "probe"  # the frame's ``data`` of a batch given as (inputs, targets)
PROBE_SEED = 0  # the RNG of every probe forward (the user's is saved and restored around it)
_CALL_KEYS = ("loss", "output", "forward_targets")  # facts that say how the probe forward calls the model


def _steps(steps: int | Sequence[int] | None) -> list[int]:
    """The updates after which to record: ``steps`` an int n (0..n) or a list (0 added: delta and own start there)."""
    if steps is None:
        steps = RECORD_STEPS
    if isinstance(steps, bool) or not isinstance(steps, (int, Sequence)) or isinstance(steps, str):
        raise CoordCheckError(f"steps must be a count of updates or a list of them, got {steps!r}")
    if isinstance(steps, int):
        if steps < 1:
            raise CoordCheckError(f"steps must be at least 1 (updates after the initialisation), got {steps}")
        return list(range(steps + 1))
    bad = [s for s in steps if isinstance(s, bool) or not isinstance(s, int) or s < 0]
    if bad or len(steps) == 0:
        raise CoordCheckError(f"steps must be updates counted from 0 (e.g. [0, 1, 2, 5, 10]), got {list(steps)!r}")
    return sorted({0, *steps})


def _probe_hash(batch: Batch) -> str:
    """A short hash of the probe batch's values and shapes: the same batch at every width, or the report refuses."""
    h = hashlib.sha256()
    for t in (batch.inputs, batch.targets):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


class Recorder:
    """What ``with coordcheck.record(...) as rec`` gives: call :meth:`step` once after each optimizer update."""

    def __init__(self, model: nn.Module, /, *, width: int, out: str | Path,
                 optimizer: torch.optim.Optimizer | None = None, batch: object = None,
                 steps: int | Sequence[int] | None = None, tensors: Sequence[str] = RECORD_TENSORS, **facts: object):
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise CoordCheckError(f"width must be a positive int (the width this run trains at), got {width!r}")
        unknown = [t for t in tensors if t not in TENSORS or t in ("loss", "load")]
        if unknown or "out" not in tensors:
            raise CoordCheckError(f"tensors must hold out and any of delta, in, own, eps, got {list(tensors)!r}")
        if isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer):  # Lightning's wrapper
            optimizer = optimizer.optimizer
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise CoordCheckError(f"optimizer must be the torch Optimizer the loop steps, got "
                                  f"{type(optimizer).__name__}")
        self.model = getattr(model, "module", model) if type(model).__name__ == "DistributedDataParallel" else model
        while isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer):  # Accelerate's, Lightning's
            optimizer = optimizer.optimizer
        self.width, self.out, self.optimizer = width, Path(out), optimizer
        self.steps = _steps(steps)
        self.tensors = tuple(t for t in tensors if t != EPS_TENSOR)
        self.facts = {k: v for k, v in facts.items() if k not in _CALL_KEYS}
        call = {k: facts[k] for k in _CALL_KEYS if k in facts}
        self.loss_fn = call.get("loss") or cross_entropy
        self.output, self.forward_targets = call.get("output"), call.get("forward_targets", False)
        self._given = batch
        self.training = False  # a step was recorded on a training batch (step(batch=...))
        self._want_eps = EPS_TENSOR in tensors and optimizer is not None
        self.updates = 0  # rec.step() calls so far
        self.records: list[StepRecord] = []
        self.probes: Probes | None = None
        self.eps: EpsProbe | None = None
        self.weights: WeightFacts | None = None
        self._t0 = 0.0
        self._spent = 0.0  # seconds in the probe forwards

    # -- the with block ---------------------------------------------------------------------------------------------
    def __enter__(self) -> Recorder:
        self._t0 = time.perf_counter()
        self.rank, self.processes = world()
        device = next(self.model.parameters(), torch.empty(0)).device
        whole = self._batch()
        self.probe_hash = _probe_hash(whole)
        self.environment = environment(device, str(self.facts.get("precision", "fp32")))
        self.batch = self._share(whole, device)
        self.audit = param_facts(self.model, self.optimizer, str(self.facts.get("parametrization", "none"))) \
            if self.optimizer is not None else None
        self.shapes = param_shapes(self.model)
        self.tied = tied_names(self.model)
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / FRAME_NAME).unlink(missing_ok=True)  # a frame of an earlier run here: never beside this one
            write_json(self.out / JOB_NAME, {**self._job(), "status": "running"})
        try:
            self.probes = Probes(self.model, tensors=self.tensors, stats=STATS, output=self.output,
                                 batch_shape=tuple(self.batch.inputs.shape))
            self.eps = EpsProbe(self.model, self.optimizer) if self._want_eps else None
            self.weights = WeightFacts(self.model, [self.optimizer] if self.optimizer is not None else [],
                                       measured_steps(self.steps), batch_shape=tuple(self.batch.inputs.shape))
            self.weights.start()
            self._probe(0)
            self.weights.expect(1)
        except BaseException as e:  # the with block never runs: no hook left on the model, the run marked stopped
            self.__exit__(type(e), e, e.__traceback__)
            raise
        return self

    def step(self, batch: object = None) -> None:
        """One optimizer update is done: record it when it is a step to record. Call it on every process.

        ``batch``: ``(inputs, targets)`` to record this step on instead of the probe batch (this process's own, in
        the probe batch's shape: the batch just trained on, say). The run then says it was recorded on the training
        batches (``data_policy`` ``training``), and the report says what that means: the widths see the same data
        only where their loaders give the same batches, and ``delta`` holds the change of the data with the
        weights'."""
        self.updates += 1
        if self.probes is None:
            return
        self.weights.settle()  # without an optimizer to hook: this update's change, measured now
        if self.updates in self.steps:
            if self.eps is not None:
                self.eps.record(self.updates)  # the state after this update, which this step's forward sees
            self._probe(self.updates, None if batch is None else self._training(batch))
        if self.updates == self.steps[-1]:  # the last step to record: nothing hooked into the loop from here
            self._detach()
        else:
            self.weights.expect(self.updates + 1)

    def __exit__(self, exc_type, exc, tb) -> None:
        if not hasattr(self, "rank"):  # never entered
            return
        self._detach()
        frame = self._frame() if self.records else None  # on every process: ε's counts are summed across them
        if self.rank != 0:
            return
        done = bool(self.records) and self.records[-1].step == self.steps[-1]
        status = "ok" if done and exc_type is None else "interrupted" if exc_type is KeyboardInterrupt else "stopped"
        facts = self._job()
        if frame is not None:
            write_frame(frame, self.out / FRAME_NAME)
            facts["rows"] = len(frame)
        if status != "ok":
            last = self.records[-1].step if self.records else None
            facts["error"] = (f"stopped after step {last} of {self.steps[-1]} ({self.updates} updates"
                              + (f"; {exc_type.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                                 if exc_type else "") + "): the frame holds the steps recorded")
        write_json(self.out / JOB_NAME, {**facts, "status": status})

    # -- helpers ----------------------------------------------------------------------------------------------------
    def _batch(self) -> Batch:
        if self._given is None:
            batch, said = batch_for(self.model)
            log.info("record: probe batch %s (read off the model; pass batch=(inputs, targets) to choose)", said)
            return batch
        try:
            return as_batch(self._given, name=PROBE_NAME)
        except CoordCheckError as e:
            raise CoordCheckError(f"batch: {e}") from None

    def _share(self, batch: Batch, device: torch.device) -> Batch:
        """This process's contiguous share of the probe batch, on the model's device."""
        if self.processes > 1:
            n = batch.inputs.shape[0]
            if n % self.processes:
                raise CoordCheckError(f"the probe batch's {n} rows do not split evenly over {self.processes} "
                                      f"processes: pass a batch whose size {self.processes} divides")
            b = n // self.processes
            batch = Batch(batch.inputs[self.rank * b:(self.rank + 1) * b],
                          batch.targets[self.rank * b:(self.rank + 1) * b], batch.name, batch.policy)
        return Batch(batch.inputs.to(device), batch.targets.to(device), batch.name, batch.policy)

    def _training(self, batch: object) -> Batch:
        """A training batch given to :meth:`step`, checked against the probe batch's shape, on the model's device."""
        try:
            b = as_batch(batch, name=self.batch.name)
        except CoordCheckError as e:
            raise CoordCheckError(f"rec.step(batch=...): {e}") from None
        if tuple(b.inputs.shape) != tuple(self.batch.inputs.shape):
            raise CoordCheckError(f"rec.step(batch=...): inputs of shape {tuple(b.inputs.shape)}, the probe batch's "
                                  f"are {tuple(self.batch.inputs.shape)}: pass batches of the probe batch's shape "
                                  f"(record(..., batch=one of them))")
        self.training = True
        return Batch(b.inputs.to(self.batch.inputs.device), b.targets.to(self.batch.inputs.device), b.name,
                     "training")

    def _probe(self, step: int, batch: Batch | None = None) -> None:
        """The probe forward of ``step`` (on ``batch``, else the probe batch): no gradients, the RNG as it was, the
        loss as the sweep computes it."""
        batch = batch or self.batch
        t0 = time.perf_counter()
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()  # manual_seed seeds every GPU: keep them
        with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if cuda else []), torch.no_grad():
            torch.manual_seed(PROBE_SEED)  # the same dropout masks at every step and width: delta is the weights'
            self.probes.begin_step(step)
            self.weights.gains.begin(step, self.weights.measuring_forward(step))
            try:
                loss = forward_loss(self.model, batch.inputs, batch.targets, self.loss_fn, output=self.output,
                                    forward_targets=self.forward_targets, probes=self.probes)
            finally:
                self.weights.gains.end()
            self.records.append(self.probes.end_step(loss))
        if not math.isfinite(self.records[-1].loss):
            log.warning("record: the probe loss is %s at step %d", self.records[-1].loss, step)
        self._spent += time.perf_counter() - t0

    def _detach(self) -> None:
        if self.probes is not None:
            self.layout = dict(self.probes.layout)
            self.probes.remove()
            self.probes = None
        if self.weights is not None:
            self.weights.remove()

    def identity(self) -> RunIdentity:
        """What the run is, the same at every width: the model's class, the parametrization it says, the optimizer's
        class and the base learning rate the run says (``lr=``; 0 when it says none: the groups' learning rates may
        all change with width, as nanochat's do, so none of them can name the run)."""
        model = str(self.facts.get("model", type(self.model).__name__))
        parametrization = str(self.facts.get("parametrization", "none"))
        optimizer = type(self.optimizer).__name__ if self.optimizer is not None else "none"
        lr = float(self.facts.get("lr", 0.0))
        policy = "training" if self.training else self.batch.policy
        config = {"model": model, "parametrization": parametrization, "optimizer": optimizer, "lr": lr,
                  "data": self.batch.name, "probe": self.probe_hash, "recorded_by": "record",
                  **({"data_policy": policy} if self.training else {})}
        return RunIdentity(config_id=digest(config), model=model, parametrization=parametrization,
                           optimizer=optimizer, lr=lr, data=self.batch.name, data_policy=policy)

    def _frame(self):
        import pandas as pd

        identity = self.identity()
        seed = int(self.facts.get("seed", 0))
        frames = [to_frame(self.records, self.layout, identity, width=self.width, seed=seed, stats=STATS)]
        if self.eps:
            frames.append(eps_frame(self.eps, self.layout, identity.columns(width=self.width, seed=seed)))
        if self.weights is not None:
            frames.append(self.weights.frame(self.layout, identity.columns(width=self.width, seed=seed)))
        return pd.concat(frames, ignore_index=True)

    def _job(self) -> dict:
        """job.json's facts: what the report reads (config_id, width, shapes, audit, modules) and the run's own."""
        identity = self.identity()
        job = {"kind": "coordcheck", "recorded_by": "record", "config_id": identity.config_id, "width": self.width,
               "identity": {k: getattr(identity, k) for k in ("model", "parametrization", "optimizer", "lr")},
               "seeds": [int(self.facts.get("seed", 0))], "steps": self.steps, "updates": self.updates,
               "data_policy": identity.data_policy,
               "probe": {"hash": self.probe_hash, "name": self.batch.name, "rows": int(self.batch.inputs.shape[0])
                         * self.processes},
               "tensors": [*self.tensors, *([EPS_TENSOR] if self._want_eps else [])],
               "shapes": self.shapes, "tied": self.tied, "n_params": n_params(self.shapes), "diverged": [],
               "seconds": round(time.perf_counter() - self._t0, 3), "probe_seconds": round(self._spent, 3),
               "facts": {k: v for k, v in self.facts.items()}, **self.environment}
        if self.audit is not None:
            job["audit"] = self.audit
        if self.records:
            job["modules"] = self.records[0].modules
            if self.records[0].notes:
                job["routing_notes"] = dict(self.records[0].notes)
            bad = next((r for r in self.records if not math.isfinite(r.loss)), None)
            if bad is not None:
                job["diverged"] = [{"seed": job["seeds"][0], "step": bad.step, "loss": repr(bad.loss)}]
        if self.processes > 1:
            job["parallel"] = {"name": "record", "processes": self.processes}
        return job


def record(model: nn.Module, /, *, width: int, out: str | Path, optimizer: torch.optim.Optimizer | None = None,
           batch: object = None, steps: int | Sequence[int] | None = None,
           tensors: Sequence[str] = RECORD_TENSORS, **facts: object) -> Recorder:
    """Record a coordinate check in your own training loop; use it as ``with record(...) as rec:`` and call
    ``rec.step()`` after each optimizer update.

    ``width``: the width this run trains at; ``out``: its job directory (``runs/w1024``), written when the block
    ends (``frame.parquet`` and ``job.json``, atomically; a run that stops early keeps the steps it recorded, marked
    ``stopped``); ``optimizer``: the optimizer the loop steps (its groups are the audit's facts, Adam's ε share is
    read from its state); ``batch``: the probe batch ``(inputs, targets)``, the same at every width (default: read
    off the model as a sweep does); ``steps``: the updates after which to record (a count n: 0..n, default 10; or a
    list: ``[0, 1, 2, 5, 10, 100]``); ``tensors``: what to record (default every tensor the causes use: out, delta,
    in, own, eps); ``facts``: what the run is (``parametrization="mup"``, ``lr=3e-4``, ``model="nanochat"``,
    ``seed=0``; anything else is kept in ``job.json``) and how the probe forward calls the model (``loss="model"``,
    ``output=0``, ``forward_targets=True``, as the sweep's keys). Judge the runs with ``python -m coordcheck.report
    runs/w256 runs/w512 runs/w1024``."""
    return Recorder(model, width=width, out=out, optimizer=optimizer, batch=batch, steps=steps, tensors=tensors,
                    **facts)
