"""Aggregation: combine the job directories of a sweep from the files on disk.

Stage: aggregate. Input: a sweep directory (any launcher, any depth of job directories, each holding
``frame.parquet`` and/or ``job.json``). Output: a :class:`Sweep`
with the combined tidy frame and the list of jobs that failed or left no complete frame — listed, never silently
ignored. Never imports torch; never unpickles (parquet and JSON only).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from coordcheck.core.errors import CoordCheckError, JobsFailedError
from coordcheck.core.frame import FRAME_NAME, FrameError, concat_frames, read_frame

__all__ = ["Sweep", "JobProblem", "aggregate", "no_frame_error", "sweep_config", "job_facts", "JOB_NAME"]

JOB_NAME = "job.json"


@dataclass(frozen=True)
class JobProblem:
    """A job that contributes no frame: ``status`` is failed / missing / corrupt."""

    job: str  # job directory relative to the sweep directory
    status: str
    error: str


def no_frame_error(sweep_dir: Path, problems: list[JobProblem]) -> CoordCheckError:
    """The error of a sweep in which no job left a frame: :class:`JobsFailedError` (exit 1, as the sweep itself
    ended) when every job recorded its failure, a plain :class:`CoordCheckError` (exit 2) when a frame is corrupt or
    missing (a directory that cannot be read as a finished sweep)."""
    first = problems[0]
    kind = JobsFailedError if all(p.status in ("failed", "interrupted") for p in problems) else CoordCheckError
    return kind(f"no job under {sweep_dir} left a frame ({len(problems)} failed or missing; first: {first.job}: "
                f"{first.error})")


@dataclass
class Sweep:
    directory: Path
    frame: pd.DataFrame
    jobs: list[str] = field(default_factory=list)  # job directories with a frame, relative
    problems: list[JobProblem] = field(default_factory=list)

    @property
    def widths(self) -> list[int]:
        return sorted(self.frame["width"].unique().tolist())


def _job_dirs(sweep_dir: Path, frame_name: str = FRAME_NAME) -> list[Path]:
    """Directories holding a frame, a job.json, or Hydra's per-job record (a job that never finished)."""
    found = {p.parent for p in sweep_dir.rglob(frame_name)} | {p.parent for p in sweep_dir.rglob(JOB_NAME)}
    found |= {p.parent.parent for p in sweep_dir.rglob(".hydra/config.yaml")}
    found.discard(sweep_dir / "report")
    return sorted(d for d in found if d != sweep_dir or (d / frame_name).exists() or (d / JOB_NAME).exists())


def _read_job(path: Path) -> dict | None:
    try:
        return json.loads((path / JOB_NAME).read_text())
    except (OSError, ValueError):
        return None


def aggregate(sweep_dir: str | Path, *, frame_name: str = FRAME_NAME, read: Callable = read_frame,
              concat: Callable = concat_frames, what: str = "coordcheck frames") -> Sweep:
    """Read every job under ``sweep_dir``; raise CoordCheckError if there is nothing to read.

    ``frame_name``, ``read`` and ``concat``: the job file and its reader (the learning-rate sweep
    passes its own: ``coordcheck.transfer_frame``)."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise CoordCheckError(f"sweep directory {sweep_dir} does not exist: pass the directory of a multirun")
    frames, jobs, problems = [], [], []
    for job_dir in _job_dirs(sweep_dir, frame_name):
        rel = str(job_dir.relative_to(sweep_dir)) or "."
        meta = _read_job(job_dir)
        status = meta.get("status") if meta else None
        if status in ("failed", "interrupted"):
            problems.append(JobProblem(rel, status, str(meta.get("error", "unknown error"))))
            continue
        if status == "running" or not (job_dir / frame_name).exists():
            problems.append(JobProblem(rel, "missing", f"no {frame_name}: the job did not finish (killed, or still "
                                                       f"running)"))
            continue
        try:
            frames.append(read(job_dir / frame_name))
            jobs.append(rel)
        except FrameError as e:
            problems.append(JobProblem(rel, "corrupt", str(e)))
    if not frames and not problems:
        raise CoordCheckError(f"no {what} under {sweep_dir}: is this a sweep directory?")
    return Sweep(sweep_dir, concat(frames), jobs, problems)

def sweep_config(sweep_dir: Path, program: str = "python -m coordcheck") -> tuple[str | None, str | None]:
    """The command and the resolved config of a sweep, from Hydra's files, when present."""
    multirun = sweep_dir / "multirun.yaml"
    config = None
    for candidate in [multirun, *sorted(sweep_dir.glob("*/.hydra/config.yaml"))[:1]]:
        if candidate.is_file():
            config = candidate.read_text()
            break
    command = None
    if multirun.is_file():
        from omegaconf import OmegaConf

        try:
            task = OmegaConf.load(multirun).hydra.overrides.task
            command = f"{program} " + " ".join(str(t) for t in task) + " --multirun"
        except Exception:  # a foreign multirun.yaml: leave the command out
            command = None
    return command, config



def job_facts(job_dir: Path) -> dict:
    """A job's ``job.json`` (status, error, facts), or ``{}`` when it has none that parses."""
    try:
        return json.loads((job_dir / "job.json").read_text())
    except (OSError, ValueError):
        return {}
