"""Data parallelism: the model wrapped the way a user's training wraps it, each process on its share of the batch.

Stage: build (between the model and its optimizer). Input: a :class:`Parallel` — ``none``, ``ddp``
(``torch.nn.parallel.DistributedDataParallel``) or a wrapping function of the user's (``wrap(model) -> module``, as
real code wraps per block) — and the process group ``torchrun`` describes (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``/``MASTER_PORT`` in the environment). Output: the wrapped module to train, the batch share of this
process, and the device it runs on.

Under ``parallel=ddp`` each process trains on an equal, contiguous share of the fixed batch (rows ``rank * b / W`` ..
``(rank + 1) * b / W``); DDP averages the gradients, so every process takes the step a single process takes on the
whole batch. The probes hook the module inside the wrapper (its names are the model's own, not ``module.*``) and
reduce each step's statistics across the processes exactly, in one collective (:mod:`coordcheck.record.ranks`): the
frame equals a one-process run on the whole batch up to float summation order. The process group is created on the
first use (gloo on the CPU, NCCL on CUDA), with a timeout (:data:`TIMEOUT_S`): a process that dies or hangs fails the
others there instead of hanging them forever.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from coordcheck.core.errors import CoordCheckError
from coordcheck.setup.data import Batch

__all__ = ["Parallel", "PARALLEL", "TIMEOUT_S", "as_parallel", "ensure_group", "instantiate_parallel"]

PARALLEL = ("none", "ddp", "fsdp")
TIMEOUT_S = 300  # a collective that waits longer than this (a dead or hung process) raises on the others


@dataclass(frozen=True)
class Parallel:
    """``name``: ``none``, ``ddp`` or ``custom`` (``wrap``: the user's wrapping function); ``timeout_s``: the process
    group's timeout."""

    name: str = "none"
    wrap_fn: Callable[[nn.Module], nn.Module] | None = None
    timeout_s: float = TIMEOUT_S

    @property
    def active(self) -> bool:
        return self.name != "none"

    def device(self, device: torch.device) -> torch.device:
        """This process's device: ``cuda:LOCAL_RANK`` for a CUDA run, else ``device``."""
        if self.active and device.type == "cuda":
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        return device

    def shard(self, batch: Batch) -> Batch:
        """This process's equal, contiguous share of ``batch`` (all of it when not parallel)."""
        if not self.active:
            return batch
        import torch.distributed as dist

        rank, size = dist.get_rank(), dist.get_world_size()
        n = batch.inputs.shape[0]
        if n % size:
            raise CoordCheckError(f"parallel={self.name}: the batch's {n} rows do not split evenly over {size} "
                                  f"processes: choose a batch size divisible by {size}")
        b = n // size
        return Batch(batch.inputs[rank * b:(rank + 1) * b], batch.targets[rank * b:(rank + 1) * b], batch.name,
                     batch.policy)

    @property
    def shards(self) -> bool:
        """Whether wrapping replaces the parameters (FSDP2): then the optimizer is built after :meth:`shard_model`."""
        return self.name == "fsdp"

    def shard_model(self, model: nn.Module) -> nn.Module:
        """FSDP2: ``fully_shard`` each residual block (:func:`coordcheck.setup.blocks.find_blocks`), then the root, in
        place. mup's width information goes with each parameter: its ``infshape`` (what MuAdam / MuSGD read) is set on
        the sharded parameter of the same name (whose ``shape`` is the global one), and each ``MuReadout``'s
        width multiplier is kept as it was (its weight is replaced by an unsharded copy in the forward)."""
        from mup import MuReadout
        from torch.distributed.fsdp import fully_shard

        from coordcheck.setup.blocks import find_blocks

        infshapes = {n: p.infshape for n, p in model.named_parameters() if hasattr(p, "infshape")}
        for m in model.modules():
            if isinstance(m, MuReadout) and hasattr(m.weight, "infshape"):
                m.width_mult = (lambda w=m.width_mult(): w)  # noqa: E731
        modules = dict(model.named_modules())
        for name in find_blocks(model):
            fully_shard(modules[name])
        fully_shard(model)
        for n, p in model.named_parameters():
            if n in infshapes:
                p.infshape = infshapes[n]
        return model

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module to train (the model itself when not parallel, or sharded in place: :meth:`shard_model`)."""
        if not self.active or self.shards:
            return model
        if self.wrap_fn is not None:
            return self.wrap_fn(model)
        from torch.nn.parallel import DistributedDataParallel

        p = next(model.parameters(), None)
        ids = [p.device.index] if p is not None and p.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)


def ensure_group(parallel: Parallel, device: torch.device) -> None:
    """Create the default process group from ``torchrun``'s environment, once; a one-line error outside it."""
    if not parallel.active:
        return
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        raise CoordCheckError(f"parallel={parallel.name} runs under torchrun (WORLD_SIZE and RANK are unset): "
                              f"torchrun --nproc-per-node N your_script.py, or parallel=none")
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=parallel.timeout_s))


def as_parallel(value: str | Callable | Parallel | None) -> Parallel:
    """``none`` / ``ddp`` / a wrapping function / a :class:`Parallel` as a :class:`Parallel`; a one-line error else."""
    if value is None:
        return Parallel()
    if isinstance(value, Parallel):
        return value
    if callable(value):
        return Parallel("custom", value)
    if value not in PARALLEL:
        raise CoordCheckError(f"parallel must be one of {', '.join(PARALLEL)} or a function wrap(model) -> module, "
                              f"got {value!r}")
    return Parallel(value)


def instantiate_parallel(node) -> Parallel:
    """The ``parallel`` config node (``conf/parallel/``) as a :class:`Parallel`; a one-line error for another name."""
    name = str(node.get("name", "none"))
    if name not in PARALLEL:
        raise CoordCheckError(f"parallel.name must be one of {', '.join(PARALLEL)}, got {name!r}")
    return Parallel(name, timeout_s=float(node.get("timeout_s", TIMEOUT_S)))
