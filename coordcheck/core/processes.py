"""Which process this is, when several train one model: torchrun's environment, else Slurm's.

Stage: core (read by :mod:`coordcheck.app.ranks` before Hydra starts and by :mod:`coordcheck.setup.parallel` when it
creates the process group; no torch import). ``torchrun`` sets ``RANK`` and ``WORLD_SIZE``; a Slurm job's tasks
(``srun ... python -m coordcheck``, or ``hydra/launcher=slurm`` with ``tasks_per_node``) have ``SLURM_PROCID`` and
``SLURM_NTASKS`` instead, which :func:`coordcheck.setup.parallel.ensure_group` maps onto torch's (through submitit).
"""

from __future__ import annotations

import os

__all__ = ["process_rank", "several_processes"]


def several_processes() -> bool:
    """Whether this process is one of several: under torchrun, or one of a Slurm job's several tasks."""
    return "WORLD_SIZE" in os.environ or int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1


def process_rank() -> int:
    """This process's rank: torchrun's ``RANK``, else Slurm's ``SLURM_PROCID`` (several tasks), else 0."""
    if "RANK" in os.environ:
        return int(os.environ["RANK"] or 0)
    if several_processes():
        return int(os.environ.get("SLURM_PROCID", "0") or 0)
    return 0
