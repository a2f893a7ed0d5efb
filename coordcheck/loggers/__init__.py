"""Experiment trackers: a sweep's jobs and its verdict in TensorBoard, MLflow or W&B (``logger=...``).

Stage: logging, beside the report. Input: the ``logger`` config group (``conf/logger/``; several at
once: ``logger=[tensorboard,mlflow,wandb]``), a job's directory after its ``job.json`` is written, a
sweep's ``report/`` after the report is written. Output: per job a run with the loss per step, the
environment and the config; per sweep a ``report`` run with the verdict, the report, the causes,
the tables and the figures — for the coordinate check and the transfer sweep alike, under the
names of :mod:`coordcheck.loggers.keys` (documented in ``docs/trackers.md``).

One module per tracker over :mod:`~coordcheck.loggers.base`; each imports its library only when a run
starts, so ``import coordcheck`` (and this package) imports no tracker. A tracker that fails is one
line (a warning, or an error with ``strict: true``), never a lost sweep: logging comes after the
frames and the report are on disk.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from coordcheck.loggers import keys
from coordcheck.loggers.base import Content, RunInfo, Tracker, TrackerError, emit

__all__ = ["Tracker", "TrackerError", "RunInfo", "Content", "emit", "keys", "trackers_of", "log_job", "log_sweep"]

log = logging.getLogger("coordcheck")

Kind = Literal["coordcheck", "transfer"]


def trackers_of(loggers: Mapping[str, Any] | None) -> tuple[list[Tracker], list[str]]:
    """The trackers of a config's ``logger`` node (``{name: {_target_: ..., ...}}``), and the one-line errors of
    the strict ones that could not be made (the others' are warnings)."""
    if not loggers:
        return [], []
    from hydra.utils import instantiate

    trackers, errors = [], []
    for name, node in loggers.items():
        strict = bool(node.get("strict", False)) if isinstance(node, Mapping) else False
        try:
            tracker = instantiate(node)
            if not isinstance(tracker, Tracker):
                raise TrackerError(f"{type(tracker).__name__} is not a coordcheck.loggers.Tracker")
            tracker.name = str(name)
            trackers.append(tracker)
        except Exception as e:
            cause = e.__cause__ or e
            line = f"tracker {name} could not be made: {(str(cause).strip().splitlines() or [''])[0]}"
            (log.error if strict else log.warning)("%s", line)
            errors += [line] if strict else []
    return trackers, errors


def log_job(loggers: Mapping[str, Any] | None, kind: Kind, job_dir: Path, root: Path,
            config: Mapping[str, Any]) -> list[str]:
    """Log the job in ``job_dir`` (after its ``job.json``) as a run named by the directory; ``root``: the sweep
    directory (the run directory of a single job). Returns the strict trackers' one-line errors."""
    trackers, errors = trackers_of(loggers)
    if not trackers:
        return errors
    from coordcheck.loggers.content import job_content

    try:
        content = job_content(kind, job_dir, config)
    except Exception as e:  # a frame that cannot be read is the report's to say; the trackers get what there is
        log.warning("trackers: could not read job %s: %s", job_dir.name, e)
        content = Content(failed=True)
    return errors + emit(trackers, RunInfo(name=job_dir.name, root=root, kind=kind, role="job"), content)


def log_sweep(loggers: Mapping[str, Any] | None, kind: Kind, sweep_dir: Path, report_dir: Path) -> list[str]:
    """Log the sweep's end (``report_dir``, once its report is written) as the run ``report``. Returns the strict
    trackers' one-line errors."""
    trackers, errors = trackers_of(loggers)
    if not trackers:
        return errors
    from coordcheck.loggers.content import sweep_content

    try:
        content = sweep_content(kind, report_dir)
    except Exception as e:
        line = f"trackers: could not read the report in {report_dir}: {e}"
        log.warning("%s", line)
        return errors + ([line] if any(t.strict for t in trackers) else [])
    return errors + emit(trackers, RunInfo(name=keys.REPORT_RUN, root=sweep_dir, kind=kind, role="report"), content)
