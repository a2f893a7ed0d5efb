"""Gradient flow: are gradients reaching every layer at the right scale? One step, or a watchdog.

Stage: the gradient-flow diagnostic, one job per module: :mod:`~coordcheck.gradflow.schema` (the
frame's columns and file names), :mod:`~coordcheck.gradflow.probe` (measure: hooks in a training
loop, torch), :mod:`~coordcheck.gradflow.registry` (the diagnoses' machinery: step views, findings,
the registry, the exit status), :mod:`~coordcheck.gradflow.checks` (the checks; diagnose),
:mod:`~coordcheck.gradflow.report` and :mod:`~coordcheck.gradflow.plot` (``gradflow.md``,
``gradflow.json``, ``gradflow.{png,pdf}``), :mod:`~coordcheck.gradflow.app` (the command
``python -m coordcheck.gradflow``). Input: a model and its training loop, or a frame on disk.
Output: the frame, its diagnoses and the report files. The public names are re-exported here; the
torch side (probe, app) is imported on first use, so that the analysis side never imports torch.
"""

from __future__ import annotations

from importlib import import_module

from coordcheck.gradflow.checks import (
    ACT_GROWTH_PER_LAYER, ACT_GROWTH_TOTAL, BLOCKING, GRAD_TREND_DECADES, MIN_TREND_LAYERS, NAME_DECADES,
    RATIO_NOT_JUDGED, SATURATION_FRAC, TREND_ROLES, diagnose, notes, zero_outputs,
)
from coordcheck.gradflow.plot import plot_gradflow
from coordcheck.gradflow.registry import (
    CHECKS, MAX_NAMES, Check, CheckSpec, Diagnoses, Diagnosis, Finding, Severity, Status, StepView, check, exit_code,
    name_list, status, step_views,
)
from coordcheck.gradflow.report import layer_summary, markdown, notebook_html, payload, write_gradflow_report
from coordcheck.gradflow.schema import (
    ACTIVATION_STATS, COLUMNS, FIGURE_NAME, FRAME_NAME, GLOBAL_NAME, GLOBAL_STATS, JSON_NAME, PARAM_STATS, REPORT_NAME,
    SCHEMA, UNUSED,
)

__all__ = [
    # schema
    "SCHEMA", "FRAME_NAME", "REPORT_NAME", "JSON_NAME", "FIGURE_NAME", "GLOBAL_NAME", "UNUSED", "COLUMNS",
    "PARAM_STATS", "ACTIVATION_STATS", "GLOBAL_STATS",
    # probe (torch)
    "GradFlowProbe", "probe_training", "gradflow_once", "SATURATING",
    # checks
    "MIN_TREND_LAYERS", "TREND_ROLES", "GRAD_TREND_DECADES", "NAME_DECADES", "ACT_GROWTH_PER_LAYER",
    "ACT_GROWTH_TOTAL", "SATURATION_FRAC", "RATIO_NOT_JUDGED", "MAX_NAMES", "Severity", "Status", "Diagnosis",
    "Diagnoses", "Finding",
    "StepView", "Check", "CheckSpec", "CHECKS", "BLOCKING", "check", "name_list", "step_views", "diagnose", "notes",
    "zero_outputs", "exit_code", "status",
    # report and plot
    "layer_summary", "payload", "markdown", "notebook_html", "write_gradflow_report", "plot_gradflow",
    # app (the command)
    "run", "main", "cli",
]

_LAZY = {  # imported on first use: they import torch
    "GradFlowProbe": "coordcheck.gradflow.probe",
    "probe_training": "coordcheck.gradflow.probe",
    "gradflow_once": "coordcheck.gradflow.probe",
    "SATURATING": "coordcheck.gradflow.probe",
    "run": "coordcheck.gradflow.app",
    "main": "coordcheck.gradflow.app",
    "cli": "coordcheck.gradflow.app",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'coordcheck.gradflow' has no attribute {name!r}")
