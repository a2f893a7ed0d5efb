"""What is shown: the compliance report of a sweep (``report.md``, ``report.json``, the tables and figures) and the
command ``python -m coordcheck.report SWEEP_DIR [--strict]``. Reads verdicts (:mod:`coordcheck.judge`), never
recomputes them; never imports torch."""

from coordcheck.report.compliance import (  # noqa: F401
    ERROR_NAME, EXIT, REPORT_DIR, Report, build_report, cli, coord_figure_options, environments, main, report_command,
    report_sweep, run_lines, write_config, write_report,
)

__all__ = ["Report", "build_report", "write_report", "report_sweep", "coord_figure_options", "main", "cli", "EXIT",
           "REPORT_DIR", "ERROR_NAME", "environments", "run_lines", "write_config", "report_command"]
