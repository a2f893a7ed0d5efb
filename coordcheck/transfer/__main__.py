"""``python -m coordcheck.transfer [overrides] --multirun``: the learning-rate sweep (``coordcheck.transfer.app``)."""

from __future__ import annotations


from omegaconf import DictConfig, OmegaConf

from coordcheck import app
from coordcheck.config import TRANSFER_REPORT, positive_number
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
    swept = {o.key_or_group: list(o.sweep_string_iterator()) for o in overrides if o.is_sweep_override()}
    for key, check in (("lr", lambda v: positive_number(v, "lr")), ("width", check_width)):
        for v in swept.get(key) or [cfg.get(key)]:
            try:
                check(float(v) if key == "width" else v)
            except ValueError:
                raise CoordCheckError(f"{key} must be a positive {'integer' if key == 'width' else 'number'}, "
                                      f"got {v!r}") from None


def cli() -> None:
    """Exit status: 2 for a user mistake (one line, before any job runs), 1 when a job failed or the sweep has no
    report; with ``report.strict=true`` the verdict's: 0 transfers, 1 does not transfer, 2 inconclusive."""
    app.run_command(transfer_app.main, config_name="transfer", groups=GROUPS, check=_check, knobs=TRANSFER_REPORT)


if __name__ == "__main__":
    cli()
