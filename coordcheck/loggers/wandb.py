"""Weights & Biases: one run per job and a ``report`` run per sweep, offline by default.

Stage: logging. Input: what :func:`coordcheck.loggers.base.emit` passes. Output: W&B runs under
``SAVE_DIR/wandb/`` (``SAVE_DIR``: ``SWEEP_DIR/wandb`` by default), grouped by the sweep's name,
``job_type`` job or report. Offline needs no account and no network; ``mode=online`` logs live
after ``wandb login``; ``WANDB_MODE`` in the environment wins over ``mode``. Unless set,
``WANDB_CACHE_DIR`` and ``WANDB_DATA_DIR`` point inside ``SAVE_DIR`` too, so nothing is written
outside the sweep directory but wandb's own settings. Params as the run's config; scalars with
``step``; texts in the run's summary; tables as ``wandb.Table``; figures as ``wandb.Image``.
Upload an offline sweep: ``wandb sync SWEEP_DIR/wandb/wandb/offline-run-*``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import pandas as pd

from coordcheck.loggers.base import RunInfo, Tracker, require

__all__ = ["WandbTracker"]


class WandbTracker(Tracker):
    """``logger=wandb``. ``mode``: offline, online or disabled; ``save_dir``: null for ``SWEEP_DIR/wandb``."""

    name = "wandb"

    def __init__(self, mode: Literal["offline", "online", "disabled"] = "offline", project: str = "coordcheck",
                 entity: str | None = None, save_dir: str | None = None, *, strict: bool = False) -> None:
        super().__init__(strict=strict)
        self.mode, self.project, self.entity, self.save_dir = mode, project, entity, save_dir
        self.run = None
        self.step = 0
        self.unset: list[str] = []  # WANDB_* variables this tracker set for its run

    def start(self, run: RunInfo) -> None:
        wandb = require("wandb", "wandb")
        root = Path(self.save_dir) if self.save_dir else run.root / "wandb"
        root.mkdir(parents=True, exist_ok=True)
        self.unset = [name for name in ("WANDB_CACHE_DIR", "WANDB_DATA_DIR") if name not in os.environ]
        for name in self.unset:  # the run's own, until finish(): the process's environment is left as it was
            os.environ[name] = str(root.resolve() / f".{name.split('_')[1].lower()}")
        settings = wandb.Settings(silent=True, console="off", disable_git=True, save_code=False, x_disable_stats=True)
        self.run = wandb.init(mode=os.environ.get("WANDB_MODE") or self.mode, dir=str(root), project=self.project,
                              entity=self.entity, group=run.group, name=run.name, job_type=run.role, tags=[run.kind],
                              reinit="create_new", settings=settings)
        self.step = 0

    def log_params(self, params: Mapping[str, str]) -> None:
        self.run.config.update(dict(params), allow_val_change=True)

    def log_scalars(self, step: int, values: Mapping[str, float]) -> None:
        self.run.log(dict(values), step=step)
        self.step = step

    def log_text(self, key: str, text: str) -> None:
        self.run.summary[key] = text

    def log_table(self, key: str, table: pd.DataFrame) -> None:
        import wandb

        self.run.log({key: wandb.Table(dataframe=table)}, step=self.step)

    def log_image(self, key: str, path: Path) -> None:
        import wandb

        self.run.log({key: wandb.Image(str(path))}, step=self.step)

    def finish(self, failed: bool = False) -> None:
        try:
            if self.run is not None:
                run, self.run = self.run, None
                run.finish(exit_code=1 if failed else 0)
        finally:
            for name in self.unset:
                os.environ.pop(name, None)
            self.unset = []
