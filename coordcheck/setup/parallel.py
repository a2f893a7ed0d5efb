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
import random
import socket
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from coordcheck.core.errors import CoordCheckError
from coordcheck.core.processes import several_processes
from coordcheck.setup.data import Batch

__all__ = ["Parallel", "PARALLEL", "TIMEOUT_S", "launch_command",
           "as_parallel", "collective_error", "ensure_group", "failure_elsewhere",
           "instantiate_parallel", "say_failed"]

PARALLEL = ("none", "ddp", "fsdp")
TIMEOUT_S = 300  # a collective that waits longer than this (a dead or hung process) raises on the others


@dataclass(frozen=True)
class Parallel:
    """``name``: ``none``, ``ddp``, ``fsdp`` or ``custom`` (``wrap``: the user's wrapping function); ``timeout_s``: the
    process group's timeout; ``find_unused_parameters``: DDP's (a model whose step leaves some parameters out of the
    loss — a routed expert that got no tokens on some process — needs it)."""

    name: str = "none"
    wrap_fn: Callable[[nn.Module], nn.Module] | None = None
    timeout_s: float = TIMEOUT_S
    find_unused_parameters: bool = False

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
        return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=self.find_unused_parameters)


def launch_command() -> str | None:
    """The command that started these processes, to run the sweep again: torchrun's own command line (its agent is
    this process's parent: read from ``/proc``), ``srun``'s under Slurm, else None (one process: the sweep's own
    command says it). Where ``/proc`` cannot be read, torchrun's environment says how many processes it started."""
    if os.environ.get("SLURM_NTASKS") and os.environ.get("SLURM_PROCID") is not None \
            and "TORCHELASTIC_RUN_ID" not in os.environ:
        return f"srun --ntasks {os.environ['SLURM_NTASKS']} python -m coordcheck"
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return None
    try:
        argv = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\0")
        args = [a.decode() for a in argv if a]
    except (OSError, UnicodeDecodeError):
        args = []
    for i, a in enumerate(args):  # python -m torch.distributed.run ..., /path/to/torchrun ..., torchrun ...
        if a.endswith("torchrun") or (a == "torch.distributed.run" and i and args[i - 1] == "-m"):
            return "torchrun " + " ".join(args[i + 1:])
    n = os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "?"))
    return f"torchrun --nproc-per-node {n} -m coordcheck"


def ensure_group(parallel: Parallel, device: torch.device) -> None:
    """Create the default process group from ``torchrun``'s environment, once; a one-line error outside it."""
    if not parallel.active:
        return
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if "WORLD_SIZE" not in os.environ and several_processes():
        _from_slurm(parallel)
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        raise CoordCheckError(f"parallel={parallel.name} runs under torchrun or as a Slurm job's tasks (WORLD_SIZE and "
                              f"RANK are unset, SLURM_NTASKS is not above 1): torchrun --nproc-per-node N "
                              f"your_script.py, or parallel=none")
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":  # one GPU a process: NCCL's object collectives use the current device
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0) or 0))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=parallel.timeout_s))
    _say(_PROCESS, f"{socket.gethostname()} {os.getpid()}")  # who runs each rank: a killed one is named (below)


def _from_slurm(parallel: Parallel) -> None:
    """A Slurm job's tasks as torch's processes (``srun``, or Hydra's Slurm launcher with ``tasks_per_node``), read
    by submitit (which parses Slurm's node lists): ``RANK`` = ``SLURM_PROCID``, ``WORLD_SIZE`` = ``SLURM_NTASKS``,
    ``LOCAL_RANK`` = ``SLURM_LOCALID``, ``MASTER_ADDR`` = the job's first node, ``MASTER_PORT`` as set, else one
    drawn from the job id (as submitit's ``TorchDistributedEnvironment`` does; the same on every task)."""
    try:
        from submitit.slurm.slurm import SlurmJobEnvironment
    except ImportError:
        raise CoordCheckError(f"parallel={parallel.name} in a Slurm job of several tasks needs submitit to map them "
                              f"onto torch's processes: pip install -e '.[launchers]', or run torchrun in each "
                              f"node's task") from None
    try:
        slurm = SlurmJobEnvironment()
        port = os.environ.get("MASTER_PORT") or str(random.Random(slurm.job_id).randint(20000, 60000))
        env = {"MASTER_ADDR": slurm.hostnames[0], "MASTER_PORT": port, "RANK": str(slurm.global_rank),
               "WORLD_SIZE": str(slurm.num_tasks), "LOCAL_RANK": str(slurm.local_rank)}
    except Exception as e:
        raise CoordCheckError(f"parallel={parallel.name}: Slurm's environment could not be read as torch's processes "
                              f"({type(e).__name__}: {e}): run torchrun in each node's task instead") from None
    os.environ.update(env)


# -- faults: what went wrong on another process -------------------------------------------------------------------
# Every process's job ends when one fails: the failing one says its error in the process group's key-value store
# (torchrun's, which outlives the workers) before it exits; the others, whose collective then fails (a closed
# connection, a timeout) or whom torchrun stops (SIGTERM), read it there and record it as their job's error. A process
# killed outright (SIGKILL, the out-of-memory killer) says nothing: a process on the same host finds it gone by its
# pid. Best effort: the store's own failure never hides the job's.
_FAILED, _STOPPED, _PROCESS = "coordcheck/failed/", "coordcheck/stopped/", "coordcheck/process/"


def _store():
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:  # (its timeout is left as it is: collectives and FSDP use the same store; reads below only after check)
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None


def _say(key: str, text: str) -> None:
    import torch.distributed as dist

    store = _store()
    if store is not None:
        try:
            store.set(f"{key}{dist.get_rank()}", text)
        except Exception:
            pass


def collective_error(error: str, timeout_s: float) -> str | None:
    """The error of a collective that another process broke (a timeout, a closed connection), in words; None for
    any other error (this process's own)."""
    low = error.lower()
    if "timed out" in low or "collective operation timeout" in low:  # (gloo; NCCL's watchdog)
        return (f"a collective timed out after {timeout_s:g} s (parallel.timeout_s): another process hung or is far "
                f"slower")
    if "connection closed" in low or "connection reset" in low or "broken pipe" in low:
        return "another process stopped (its connection closed)"
    return None


def say_failed(text: str, stopped: bool = False) -> None:
    """This process's error (or, ``stopped``, that it was stopped from outside), for the others to report."""
    _say(_STOPPED if stopped else _FAILED, text)


def failure_elsewhere(wait_s: float = 2.0) -> str | None:
    """What another process said of its failure (``rank R: ...``), else the rank of one on this host that is gone
    without a word (killed); None when nothing is known. Waits up to ``wait_s`` for a word."""
    import time

    import torch.distributed as dist

    store = _store()
    if store is None:
        return None
    me, procs = dist.get_rank(), dist.get_world_size()
    others = [q for q in range(procs) if q != me]
    end, host = time.monotonic() + wait_s, socket.gethostname()
    try:
        while True:
            for q in others:  # (a process says its error before it exits: a gone one without a word said none)
                if store.check([f"{_FAILED}{q}"]):
                    return f"rank {q}: {store.get(f'{_FAILED}{q}').decode()}"
            for q in others:
                if store.check([f"{_PROCESS}{q}"]) and not store.check([f"{_STOPPED}{q}"]):
                    where, pid = store.get(f"{_PROCESS}{q}").decode().rsplit(" ", 1)
                    if where == host and _gone(int(pid)):
                        return (f"rank {q} stopped without an error (killed: by a signal, or by the host's "
                                f"out-of-memory killer)")
            if time.monotonic() >= end:
                return None
            time.sleep(0.1)
    except Exception:
        return None


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie not yet reaped has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            return True
        except OSError:
            return False


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
    return Parallel(name, timeout_s=float(node.get("timeout_s", TIMEOUT_S)),
                    find_unused_parameters=bool(node.get("find_unused_parameters", False)))
