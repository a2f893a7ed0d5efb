"""``python -m coordcheck.transfer [overrides] --multirun``: the learning-rate sweep (``coordcheck.transfer.app``)."""

from __future__ import annotations


from omegaconf import DictConfig, OmegaConf

from coordcheck import app
from coordcheck.config import TRANSFER_REPORT, check_values, positive_number
from coordcheck.errors import CoordCheckError, check_count
from coordcheck.transfer import app as transfer_app

GROUPS = ("model", "parametrization", "optimizer")


def _check(cfg: DictConfig, overrides: list) -> None:
    """The transfer sweep's own keys and every swept value of width and lr, before any job runs (the report knobs
    and the run keys are checked by ``config.check_command_line``)."""
    from coordcheck.models import check_width
    from coordcheck.train import resolve_seeds

    for key in ("steps", "eval_batches"):
        check_count(cfg.get(key), key)
    if not positive_number(cfg.diverge, "diverge") > 1:
        raise CoordCheckError(f"diverge must be a number > 1 (a multiple of the first loss), got {cfg.diverge!r}")
    resolve_seeds(OmegaConf.to_object(cfg.seeds) if OmegaConf.is_config(cfg.seeds) else cfg.seeds)
    check_values(cfg, overrides, {"lr": lambda v: positive_number(v, "lr"), "width": check_width})


def cli() -> None:
    """Exit status: 2 for a user mistake (one line, before any job runs), 1 when a job failed or the sweep has no
    report; with ``report.strict=true`` the verdict's: 0 transfers, 1 does not transfer, 2 inconclusive."""
    app.run_command(transfer_app.main, config_name="transfer", groups=GROUPS, check=_check, knobs=TRANSFER_REPORT)


if __name__ == "__main__":
    cli()
