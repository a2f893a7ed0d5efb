"""Several processes under ``torchrun`` (``parallel=ddp|fsdp``): who writes, and one decision for all of them.

Stage: app (below :mod:`coordcheck.app.jobs`, which calls these around Hydra and each job). Input: the command line,
the job's config and ``torchrun``'s environment (``RANK``, ``WORLD_SIZE``). Output: a scratch directory for the
Hydra files of every process but rank 0 (so that only rank 0 writes the user's sweep), rank 0's resume decision given
to every process, this process's rank, and the process group left at the end. The training side is
:mod:`coordcheck.setup.parallel`.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from coordcheck.core.processes import process_rank, several_processes

__all__ = ["PARALLEL_RUN_KEYS", "SCRATCH_ENV", "other_rank_dirs", "end_group", "parallel_rank", "rank0_decides",
           "rank_job_dir", "rank_outcome"]


SCRATCH_ENV = "COORDCHECK_RANK_SCRATCH"  # set by other_rank_dirs: this process's Hydra files are in scratch already
PARALLEL_RUN_KEYS = ("hydra.sweep.dir=", "hydra.run.dir=", "hydra.output_subdir=", "hydra/job_logging=",
                     "hydra/hydra_logging=")


def other_rank_dirs() -> str | None:
    """Under ``torchrun`` with ``parallel`` set, a process other than rank 0 keeps Hydra's files (its sweep and job
    directories, logs, multirun.yaml) in a scratch directory, so that only rank 0 writes the user's sweep; its path,
    removed at the end, or None."""
    rank = process_rank()
    parallel = [a for a in sys.argv[1:] if a.startswith("parallel=") and a != "parallel=none"]
    if rank == 0 or not parallel or not several_processes():
        return None
    scratch = tempfile.mkdtemp(prefix=f"coordcheck-rank{rank}-")
    os.environ[SCRATCH_ENV] = scratch  # (its jobs' directories are in it already: rank_job_dir)
    sys.argv[1:] = [f"hydra.sweep.dir={scratch}", f"hydra.run.dir={scratch}", "hydra.output_subdir=null",
                    "hydra/job_logging=disabled", "hydra/hydra_logging=disabled",  # (before --multirun: positional)
                    *(a for a in sys.argv[1:] if not a.startswith(PARALLEL_RUN_KEYS))]
    return scratch


def end_group() -> None:
    """Leave the process group a parallel run created (coordcheck.setup.parallel), if any (torch is not imported
    for it: ``--help`` and a config error stay fast)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def parallel_rank(cfg: DictConfig) -> int | None:
    """This process's rank under ``parallel`` (several processes in lockstep), else None."""
    node = cfg.get("parallel")
    if node is None or node.get("name", "none") == "none":
        return None
    return process_rank()


def rank_job_dir(cfg: DictConfig, output_dir: Path) -> tuple[Path, Callable[[], None]]:
    """Where this process writes a job's files, and what removes them after: rank 0 (or one process) the job's
    directory; another process a scratch directory, unless it already runs in one (:func:`other_rank_dirs`). Under
    Hydra's Slurm launcher (``hydra/launcher=slurm``, ``tasks_per_node`` > 1) every task runs the job in the same
    directory: only rank 0's frames, ``job.json`` and log lines go there."""
    rank = parallel_rank(cfg)
    if not rank or os.environ.get(SCRATCH_ENV):
        return output_dir, lambda: None
    scratch = Path(tempfile.mkdtemp(prefix=f"coordcheck-rank{rank}-job-"))
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:  # Hydra's job log: rank 0's
        if Path(h.baseFilename).parent == output_dir:
            root.removeHandler(h)
            h.close()
    return scratch, lambda: shutil.rmtree(scratch, ignore_errors=True)


def rank0_decides(cfg: DictConfig, done: dict | None) -> dict | None:
    """Under ``parallel`` (several processes, one job at a time in lockstep), rank 0's resume decision, given to
    every process (the others keep no record of their own); ``done`` as it is otherwise."""
    node = cfg.get("parallel")
    if node is None or node.get("name", "none") == "none":
        return done
    from coordcheck.setup.device import resolve_device
    from coordcheck.setup.parallel import ensure_group, instantiate_parallel

    ensure_group(instantiate_parallel(node), resolve_device(cfg.get("device", "auto")))
    import torch.distributed as dist

    box = [done]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def rank_outcome(cfg: DictConfig, label: str, status: str, error: str) -> tuple[str, str]:
    """Under ``parallel``, the job's ``(status, error)`` on this process when it did not end well: its own error
    (said to the others), or what another process said of its failure (``rank R: ...``) when this one's collective
    broke or torchrun stopped it, or the collective's failure in words (a timeout); ``interrupted`` stays so when
    nothing is known (stopped from outside: Ctrl-C, scancel)."""
    from coordcheck.setup.parallel import TIMEOUT_S, collective_error, failure_elsewhere, say_failed

    mine = collective_error(error, float(cfg.parallel.get("timeout_s", TIMEOUT_S)))
    if mine is None and status != "interrupted":
        say_failed(f"{label} {status}: {error}")
        return status, error
    other = failure_elsewhere()
    if other is not None:
        return "failed", other
    if mine is not None:
        say_failed(f"{label} failed: {mine}")
        return "failed", mine
    say_failed(label, stopped=True)
    return status, error
