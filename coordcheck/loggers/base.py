"""What every tracker implements, and the guard that keeps a failing tracker from losing a sweep.

Stage: logging. Input: a :class:`Content` (what one run shows, :mod:`coordcheck.loggers.content`)
and the trackers a config asked for. Output: one run per call in each tracker. A tracker that cannot
be imported, started or written to is one line on the log — a warning, or an error when its
``strict`` is true — and the others go on; the caller records the strict ones so the command exits 1.
Nothing here imports a tracker library: each tracker imports its own in :meth:`Tracker.start`.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd

__all__ = ["Tracker", "TrackerError", "RunInfo", "Content", "emit", "require"]

log = logging.getLogger("coordcheck")


class TrackerError(Exception):
    """A tracker that cannot run as configured (not installed, a bad setting): its message is the one line."""


def require(module: str, extra: str):
    """``import module``, or a :class:`TrackerError` saying what to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise TrackerError(f"{module} is not installed ({e}): pip install 'coordcheck[{extra}]'") from None


@dataclass(frozen=True)
class RunInfo:
    """Which run: ``name`` (the job's directory name, or ``report``), ``root`` (the sweep directory, or the run
    directory of a single job: trackers' local files go below it), ``kind`` and ``role``."""

    name: str
    root: Path
    kind: Literal["coordcheck", "transfer"] = "coordcheck"
    role: Literal["job", "report"] = "job"

    @property
    def group(self) -> str:
        """The sweep's name, as W&B groups runs: the sweep directory's path from ``outputs/``, or its name."""
        parts = self.root.resolve().parts
        return "/".join(parts[parts.index("outputs") + 1:]) if "outputs" in parts[:-1] else self.root.name


@dataclass
class Content:
    """What one run shows. ``scalars``: (step, {key: value}) in ascending step; ``params``: flat key → string."""

    params: dict[str, str] = field(default_factory=dict)
    scalars: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    images: dict[str, Path] = field(default_factory=dict)
    failed: bool = False


class Tracker(ABC):
    """One experiment tracker, one run at a time: :meth:`start`, the ``log_*`` calls, :meth:`finish`.

    ``strict``: a failure of this tracker fails the command (exit 1) instead of being a warning; the frames and
    the report are written either way."""

    name = "tracker"

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = bool(strict)

    @abstractmethod
    def start(self, run: RunInfo) -> None:
        ...

    @abstractmethod
    def log_params(self, params: Mapping[str, str]) -> None:
        ...

    @abstractmethod
    def log_scalars(self, step: int, values: Mapping[str, float]) -> None:
        ...

    @abstractmethod
    def log_text(self, key: str, text: str) -> None:
        ...

    @abstractmethod
    def log_table(self, key: str, table: pd.DataFrame) -> None:
        ...

    @abstractmethod
    def log_image(self, key: str, path: Path) -> None:
        ...

    def finish(self, failed: bool = False) -> None:
        raise NotImplementedError


def _first_line(e: BaseException) -> str:
    line = (str(e).strip().splitlines() or [""])[0]
    return line if isinstance(e, TrackerError) else f"{type(e).__name__}: {line}".removesuffix(": ")


def emit(trackers: list[Tracker], run: RunInfo, content: Content) -> list[str]:
    """Write ``content`` as the run ``run`` to each tracker. Returns the one-line errors of the strict trackers that
    failed (the others' failures are warnings); never raises for a tracker's fault."""
    errors = []
    for tracker in trackers:
        doing = "start"
        try:
            tracker.start(run)
            doing = "log to"
            tracker.log_params(content.params)
            for step, values in content.scalars:
                tracker.log_scalars(step, values)
            for key, text in content.texts.items():
                tracker.log_text(key, text)
            for key, table in content.tables.items():
                tracker.log_table(key, table)
            for key, path in content.images.items():
                tracker.log_image(key, path)
            doing = "finish"
            tracker.finish(content.failed)
        except Exception as e:
            line = f"tracker {tracker.name} could not {doing} run {run.name}: {_first_line(e)}"
            if tracker.strict:
                log.error("%s (strict: the command will exit 1)", line)
                errors.append(line)
            else:
                log.warning("%s (the frames and report are written regardless)", line)
            try:  # after a failed start too: what it set up is undone (finish is a no-op when nothing started)
                tracker.finish(True)
            except Exception:  # already broken: the line above says so
                pass
    return errors
