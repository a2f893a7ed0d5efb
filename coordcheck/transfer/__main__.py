"""``python -m coordcheck.transfer [overrides] --multirun``: the learning-rate sweep (``coordcheck.transfer.app``)."""

from __future__ import annotations


from typing import Any

from omegaconf import DictConfig

from coordcheck.app import jobs as app
from coordcheck.core.errors import positive_number
from coordcheck.app.checks import JOB_CHECKS, check_values, one_value
from coordcheck.transfer.knobs import TRANSFER_REPORT
from coordcheck.core.errors import CoordCheckError, check_count
from coordcheck.transfer import app as transfer_app

GROUPS = ("model", "parametrization", "optimizer", "init", "logger")


def _diverge(value: Any) -> float:
    if not positive_number(value, "diverge") > 1:
        raise CoordCheckError(f"diverge must be a number > 1 (a multiple of the first loss), got {value!r}")
    return float(value)


CHECKS = {**JOB_CHECKS, "eval_batches": one_value(lambda v: check_count(v, "eval_batches"), "eval_batches"),
          "diverge": one_value(_diverge, "diverge")}  # the keys a transfer job reads


def _check(cfg: DictConfig, overrides: list) -> None:
    """The transfer sweep's keys, every value each takes (the grid's included), before any job runs (the report
    knobs, the run keys and the targets are checked by ``checks.check_command_line``)."""
    check_values(cfg, overrides, CHECKS)


def cli() -> None:
    """Exit status: 2 for a user mistake (one line, before any job runs), 1 when a job failed or the sweep has no
    report; with ``report.strict=true`` the verdict's: 0 transfers, 1 does not transfer, 2 inconclusive."""
    app.run_command(transfer_app.main, config_name="transfer", groups=GROUPS, check=_check, knobs=TRANSFER_REPORT)


if __name__ == "__main__":
    cli()
