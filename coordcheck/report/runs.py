"""Runs made elsewhere, judged as one sweep: ``python -m coordcheck.report runs/w256 runs/w512 runs/w1024``.

Stage: report (its input side). Input: paths (a run's job directory, a folder of them, or a glob of either) of runs
written by :func:`coordcheck.record` in separate processes or on other machines. Output: the runs' combined frame and
facts, or one :class:`~coordcheck.core.errors.CoordCheckError` that lists, one line each, every run that cannot be
compared with the others: recorded on another probe batch, at other steps, of another model, parametrization or
optimizer, at a width another run has, with nothing recorded (still running, or killed before its first step), or
fewer than two widths in all. Never imports torch.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from coordcheck.core.errors import CoordCheckError, RefusedError
from coordcheck.core.frame import FRAME_NAME, UPDATE_TENSOR, concat_frames
from coordcheck.run.sweep import JOB_NAME, aggregate, job_facts

__all__ = ["Runs", "expand", "read_runs", "runs_out", "recorded", "CAUSE_HINT", "TRAINING_NOTE"]

TRAINING_NOTE = ("recorded on the training batches (rec.step(batch=...)), not one probe batch: the widths saw the "
                 "same data only where their loaders gave the same batches, and delta holds the change of the data "
                 "with the weights'")
CAUSE_HINT = ("the causes need the facts measured from the weights (each parameter's update, each module's "
              "multiplier), which {which} did not record (a recorder older than issue 42's): record them again")


@dataclass
class Runs:
    """The runs' combined ``frame``, their directories (``jobs``, as given) and ``facts`` (job.json), and notes."""

    frame: pd.DataFrame
    jobs: list[str]
    facts: list[dict]
    notes: list[str] = field(default_factory=list)


def expand(paths: Sequence[str | Path]) -> list[Path]:
    """The paths given, a glob pattern (``runs/w*``) replaced by what it matches (one line when it matches none)."""
    out: list[Path] = []
    for p in map(str, paths):
        if glob.has_magic(p):
            found = sorted(glob.glob(p))
            if not found:
                raise CoordCheckError(f"{p} matches nothing: pass run directories (runs/w256 runs/w512) or a folder")
            out += map(Path, found)
        else:
            out.append(Path(p))
    return out


def _run_dirs(paths: Sequence[Path]) -> list[Path]:
    """Each path's run directories: the path itself when it holds a job.json or a frame, else its subfolders that
    do (at any depth)."""
    runs: list[Path] = []
    for p in paths:
        if not p.is_dir():
            raise CoordCheckError(f"{p} is not a directory: pass run directories (record(..., out=...)) or a folder")
        if (p / JOB_NAME).exists() or (p / FRAME_NAME).exists():
            runs.append(p)
            continue
        found = sorted({f.parent for f in [*p.rglob(JOB_NAME), *p.rglob(FRAME_NAME)]} - {p / "report"})
        if not found:
            raise CoordCheckError(f"{p} holds no run (no {JOB_NAME} or {FRAME_NAME} under it)")
        runs += found
    return list(dict.fromkeys(runs))


def _same(runs: list[tuple[Path, dict]], key, what: str, refuse: list[str]) -> None:
    """A line in ``refuse`` for each run whose ``key(facts)`` differs from the first run's."""
    first_dir, first = runs[0]
    want = key(first)
    for d, f in runs[1:]:
        have = key(f)
        if have != want:
            refuse.append(f"{d}: {what} {have} where {first_dir} has {want}")


def read_runs(paths: Sequence[str | Path]) -> Runs:
    """The runs under ``paths`` as one sweep (module docstring); raises one error listing every run refused."""
    dirs = _run_dirs(expand(paths))
    refuse: list[str] = []
    kept: list[tuple[Path, dict]] = []
    for d in dirs:
        f = job_facts(d)
        status = f.get("status")
        if not (d / FRAME_NAME).exists():
            refuse.append(f"{d}: nothing recorded (status {status or 'unknown'}: still running, or stopped before "
                          f"its first step): wait for it, or leave it out")
        elif status not in ("ok", None):
            refuse.append(f"{d}: {status}: {f.get('error', 'no reason recorded')}: judge it apart, or run it again")
        else:
            kept.append((d, f))
    widths: dict[int, Path] = {}
    for d, f in kept:
        w = f.get("width")
        if w is None:
            refuse.append(f"{d}: no width in its {JOB_NAME} (a run of coordcheck.record says its width)")
        elif int(w) in widths:
            refuse.append(f"{d}: width {w} again ({widths[int(w)]} has it): one run per width")
        else:
            widths[int(w)] = d
    if len(kept) > 1:
        _same(kept, lambda f: (f.get("probe") or {}).get("hash"), "recorded on probe batch", refuse)
        _same(kept, lambda f: f.get("steps"), "recorded steps", refuse)
        _same(kept, lambda f: f.get("data_policy", "fixed"), "recorded on batches", refuse)
        for name in ("model", "parametrization", "optimizer"):
            _same(kept, lambda f, n=name: _identity(f).get(n), f"{name}", refuse)
    if not refuse and len(widths) < 2:
        refuse.append(f"one width ({', '.join(map(str, widths)) or 'none'}): a width-invariance test needs runs at "
                      f"two widths or more (three to pass)")
    if refuse:
        raise RefusedError("these runs cannot be judged as one sweep:", refuse)
    frames = [aggregate(d).frame for d, _ in kept]
    frame = concat_frames(frames)
    facts = [f for _, f in kept]
    notes = []
    if any(f.get("data_policy") == "training" for _, f in kept):
        notes.append(TRAINING_NOTE)
    missing = [str(d) for (d, _), fr in zip(kept, frames) if not (fr["tensor"] == UPDATE_TENSOR).any()]
    if missing:
        notes.append(CAUSE_HINT.format(which=", ".join(missing)))
    return Runs(frame, [str(d) for d, _ in kept], facts, notes)


def _identity(facts: dict) -> dict:
    """What a run says it is (model, parametrization, optimizer) from its job.json, as the frame's columns hold it."""
    own = facts.get("identity") or {}
    return {k: own.get(k) for k in ("model", "parametrization", "optimizer")}


def recorded(folder: Path) -> bool:
    """Whether ``folder`` holds runs of :func:`coordcheck.record` (judged as runs, not as a Hydra sweep)."""
    return any(job_facts(j.parent).get("recorded_by") == "record" for j in folder.rglob(JOB_NAME))


def runs_out(paths: Sequence[str | Path]) -> Path:
    """Where the report of several runs goes by default: ``report/`` in the folder that holds them all."""
    dirs = _run_dirs(expand(paths))
    common = Path(os.path.commonpath([str(d.resolve()) for d in dirs]))
    if len(dirs) == 1 or common in {d.resolve() for d in dirs}:
        common = common.parent
    return common / "report"
