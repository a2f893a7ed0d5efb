"""Several processes under ``torchrun`` (``parallel=ddp|fsdp``): who writes, and one decision for all of them.

Stage: app (below :mod:`coordcheck.app.jobs`, which calls these around Hydra and each job). Input: the command line,
the job's config and ``torchrun``'s environment (``RANK``, ``WORLD_SIZE``). Output: a scratch directory for the
Hydra files of every process but rank 0 (so that only rank 0 writes the user's sweep), rank 0's resume decision given
to every process, this process's rank, and the process group left at the end. The training side is
:mod:`coordcheck.setup.parallel`.
"""

from __future__ import annotations

import os
import sys
import tempfile

from omegaconf import DictConfig

__all__ = ["PARALLEL_RUN_KEYS", "other_rank_dirs", "end_group", "parallel_rank", "rank0_decides"]


PARALLEL_RUN_KEYS = ("hydra.sweep.dir=", "hydra.run.dir=", "hydra.output_subdir=", "hydra/job_logging=",
                     "hydra/hydra_logging=")


def other_rank_dirs() -> str | None:
    """Under ``torchrun`` with ``parallel`` set, a process other than rank 0 keeps Hydra's files (its sweep and job
    directories, logs, multirun.yaml) in a scratch directory, so that only rank 0 writes the user's sweep; its path,
    removed at the end, or None."""
    rank = int(os.environ.get("RANK", "0") or 0)
    parallel = [a for a in sys.argv[1:] if a.startswith("parallel=") and a != "parallel=none"]
    if rank == 0 or not parallel or "WORLD_SIZE" not in os.environ:
        return None
    scratch = tempfile.mkdtemp(prefix=f"coordcheck-rank{rank}-")
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
    return int(os.environ.get("RANK", "0") or 0)


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
