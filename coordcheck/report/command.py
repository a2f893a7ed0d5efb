"""The report command: ``python -m coordcheck.report SWEEP_DIR [--strict]`` (console script ``coordcheck-report``).

Stage: report (its command line). Input: a sweep directory and the verdict's flags (one per knob of
:data:`coordcheck.report.knobs.REPORT`). Output: ``SWEEP_DIR/report/``
(:func:`coordcheck.report.compliance.report_sweep`),
the summary on stdout, the exit status. A directory of another experiment's sweep (a learning-rate sweep's
``transfer.parquet`` frames) goes to that experiment's report command (:class:`coordcheck.report.common.ReportCommand`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from coordcheck.core.frame import FRAME_NAME
from coordcheck.report.common import report_command, report_commands
from coordcheck.report.compliance import report_sweep
from coordcheck.report.knobs import REPORT

__all__ = ["main", "cli"]


def main(argv: list[str] | None = None) -> int:
    """One report command for every experiment: a directory whose jobs wrote another experiment's frames and no
    coordinate-check frame is handed to that experiment's command (the learning-rate sweep's:
    ``coordcheck.transfer.report``, its flags ``--tol``, ``--min-points``, ...; see its ``--help``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    sweep = next((Path(a) for a in argv if not a.startswith("-") and Path(a).is_dir()), None)
    if sweep is not None and next(sweep.rglob(FRAME_NAME), None) is None:
        for other in report_commands():
            if next(sweep.rglob(other.frame_name), None) is not None:
                return other.main(argv)
    return report_command(
        argv, prog="python -m coordcheck.report", knobs=REPORT, report=report_sweep,
        description="Aggregate a coordcheck sweep directory, judge muP compliance and write report/.",
        sweep_help="the multirun directory (outputs/multirun/DATE/TIME); a learning-rate sweep's "
                   "(outputs/transfer/...) gets the transfer report; or runs recorded elsewhere "
                   "(coordcheck.record): their directories, a folder of them or a glob (runs/w*), judged as one sweep",
        runs=True,
    )


def cli() -> None:
    """Console-script entry point (``coordcheck-report``)."""
    sys.exit(main())
