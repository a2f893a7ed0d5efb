"""The diagnoses' machinery: what a check is given, what it returns, where it registers, and the exit status.

Stage: diagnose (analysis side; never imports torch). Input: a gradient-flow frame (schema in
:mod:`coordcheck.gradflow.schema`), cut by :func:`step_views` into one :class:`StepView` per probe step — what each
check is given. Output: the vocabulary the checks of :mod:`coordcheck.gradflow.checks` speak — :class:`Finding` (what
a check returns), :class:`Diagnosis` (what the report shows), the registry ``CHECKS`` that :func:`check` fills,
:func:`name_list` for their messages — and, for a list of diagnoses, its ``status`` and ``exit_code`` (from
``coordcheck.core.errors.EXIT``). The checks themselves, and :func:`~coordcheck.gradflow.checks.diagnose` that runs
them, are in :mod:`coordcheck.gradflow.checks`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from coordcheck.core.errors import EXIT
from coordcheck.gradflow.schema import ACTIVATION_STATS, PARAM_STATS

__all__ = ["MAX_NAMES", "Severity", "Status", "Diagnosis", "Diagnoses", "Finding", "StepView", "Check", "CheckSpec",
           "CHECKS", "NOTEBOOK_VIEW", "check", "name_list", "step_views", "exit_code", "status"]

MAX_NAMES = 6  # names spelled out in a message; Diagnosis.names keeps them all
# What a notebook shows of a list of diagnoses: coordcheck.gradflow.report.notebook_html registers itself here (the
# package imports it), so that this module, below the report, never imports it
NOTEBOOK_VIEW: list[Callable] = []

Severity = Literal["error", "warning"]
Status = Literal["ok", "warning", "error"]  # outcomes in coordcheck.core.errors.EXIT


# -- diagnoses --------------------------------------------------------------------------
@dataclass(frozen=True)
class Diagnosis:
    """One finding: ``names`` are parameter or module names, most relevant first."""

    code: str
    severity: Severity
    message: str
    fix: str
    names: tuple[str, ...] = ()
    steps: tuple[int, ...] = ()

    def line(self) -> str:
        return f"{self.severity.upper()} {self.code}: {self.message} — fix: {self.fix}"


class Diagnoses(list):
    """What :func:`~coordcheck.gradflow.checks.diagnose` returns: its :class:`Diagnosis` list (errors first) with the
    frame it read (``frame``), its ``status`` and ``exit_code``. In a notebook it shows itself: the status, each
    diagnosis with its fix, the notes and the figure (drawn once), the per-layer table folded — the report of
    :mod:`coordcheck.gradflow.report`, imported when first shown (it sits above this module)."""

    def __init__(self, diagnoses: Iterable[Diagnosis] = (), frame: pd.DataFrame | None = None) -> None:
        super().__init__(diagnoses)
        self.frame = frame
        self._figure: str | None = None

    @property
    def status(self) -> Status:
        return status(self)

    @property
    def exit_code(self) -> int:
        return exit_code(self)

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        bundle, self._figure = NOTEBOOK_VIEW[0](self, self.frame, self._figure)
        return bundle


@dataclass(frozen=True)
class Finding:
    """What a check returns; the registry adds the code and the default severity."""

    message: str
    fix: str
    names: tuple[str, ...] = ()
    severity: Severity | None = None


@dataclass
class StepView:
    """One probe step, wide: ``params`` and ``acts`` have one row per name, a column per stat."""

    step: int
    params: pd.DataFrame  # index name; module, layer_index, role, *PARAM_STATS
    acts: pd.DataFrame  # index name; module, layer_index, role, *ACTIVATION_STATS
    glob: dict[str, float]
    learning: bool

    @property
    def trainable(self) -> pd.DataFrame:
        return self.params[self.params["requires_grad"] == 1]

    @property
    def scaled(self) -> bool:
        return math.isfinite(self.glob.get("loss_scale", math.nan))


Check = Callable[[StepView], "Finding | None"]


@dataclass(frozen=True)
class CheckSpec:
    code: str
    severity: Severity
    run: Check
    suppresses: tuple[str, ...] = ()  # codes that say nothing more once this one fires


CHECKS: dict[str, CheckSpec] = {}


def check(code: str, severity: Severity, suppresses: tuple[str, ...] = ()) -> Callable[[Check], Check]:
    """Register a check under ``code``; order of registration is the order of the report."""
    def register(fn: Check) -> Check:
        CHECKS[code] = CheckSpec(code, severity, fn, suppresses)
        return fn
    return register


def name_list(names: Iterable[str]) -> str:
    """The first ``MAX_NAMES`` names, comma-separated, then how many more."""
    names = list(names)
    shown = ", ".join(names[:MAX_NAMES])
    return shown + (f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else "")


# -- from a frame to step views ---------------------------------------------------------
def _wide(df: pd.DataFrame, stats: tuple[str, ...]) -> pd.DataFrame:
    meta = df.drop_duplicates("name").set_index("name")[["module", "layer_index", "role"]]
    wide = df.pivot(index="name", columns="stat", values="value").reindex(columns=list(stats))
    return meta.join(wide)


def step_views(frame: pd.DataFrame, *, learning: bool = True) -> list[StepView]:
    """One :class:`StepView` per probe step, in step order."""
    views = []
    for step, df in frame.groupby("step", sort=True):
        glob = df[df["kind"] == "global"]
        views.append(StepView(
            int(step),
            _wide(df[df["kind"] == "param"], PARAM_STATS),
            _wide(df[df["kind"] == "activation"], ACTIVATION_STATS),
            dict(zip(glob["stat"], glob["value"].astype(float))),
            learning,
        ))
    return views


def exit_code(diagnoses: Iterable[Diagnosis]) -> int:
    """1 when a blocking (error) diagnosis fired, else 0: the CI gate (``coordcheck.core.errors.EXIT`` of
    :func:`status`)."""
    return EXIT[status(diagnoses)]


def status(diagnoses: Iterable[Diagnosis]) -> Status:
    """``error`` when a blocking diagnosis fired, else ``warning`` when any did, else ``ok``."""
    sev = {d.severity for d in diagnoses}
    return "error" if "error" in sev else "warning" if sev else "ok"
