"""What is shown: the compliance report of a sweep (``report.md``, ``report.json``, the tables and figures:
:mod:`~coordcheck.report.compliance`), its knobs (:mod:`~coordcheck.report.knobs`), what every experiment's report
shares (:mod:`~coordcheck.report.common`) and the command ``python -m coordcheck.report SWEEP_DIR [--strict]``
(:mod:`~coordcheck.report.command`). Reads verdicts (:mod:`coordcheck.judge`), never recomputes them; never imports
torch."""

from coordcheck.core.errors import EXIT
from coordcheck.report.command import cli, main
from coordcheck.report.common import (
    ERROR_NAME, REPORT_DIR, environments, report_command, run_lines, write_config,
)
from coordcheck.report.compliance import Report, build_report, coord_figure_options, report_sweep, write_report

__all__ = ["Report", "build_report", "write_report", "report_sweep", "coord_figure_options", "main", "cli", "EXIT",
           "REPORT_DIR", "ERROR_NAME", "environments", "run_lines", "write_config", "report_command"]
