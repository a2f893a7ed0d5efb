"""The μTransfer Hydra app: one job = one (width, learning rate, parametrization) of the grid.

Stage: orchestration (the learning-rate sweep's twin of ``coordcheck.app``, sharing its job
machinery: resume by config hash, atomic ``transfer.parquet`` then ``job.json``, failures recorded
per job, SIGTERM unwound). At the end of a multirun :class:`TransferCallback` aggregates the job
frames on disk, whatever launcher ran them, and writes ``SWEEP_DIR/report/`` (transfer.md,
transfer.json, the figures). Exit status as the coordinate check: 2 for a user mistake (one line,
before any job runs), 1 when a job failed or no report could be made, and with
``report.strict=true`` the verdict's (0 transfers, 1 does not transfer, 2 inconclusive).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from coordcheck.app import jobs as app
from coordcheck.app.config import NOT_IN_JOB, instantiate_node, resolved_config
from coordcheck.core.errors import positive_number
from coordcheck.core.errors import check_loss
from coordcheck.core.frame import digest
from coordcheck.transfer import frame as transfer_frame
from coordcheck.transfer.knobs import TRANSFER_REPORT, transfer_options  # noqa: F401  (transfer_options: re-exported)

__all__ = ["main", "run_transfer_job", "TransferCallback", "transfer_options", "rules_of", "grid_size", "NOT_IN_ID",
           "NOT_IN_FAMILY"]

log = logging.getLogger("coordcheck")
app.FRAME_FILES["transfer"] = (transfer_frame.FRAME_NAME, transfer_frame.read_frame)  # resume: the frame its jobs write

NOT_IN_ID = ("width", "lr", "device", *NOT_IN_JOB)  # a grid's config_id: the same for every (width, lr) of a depth
NOT_IN_FAMILY = ("depth", "experts", *NOT_IN_ID)  # its family_id: the same for every depth and number of experts
# too (the depth and experts axes group by it)


def rules_of(options: Mapping[str, Any]) -> Any:
    """:class:`TransferRules` from the report knobs (``config.TRANSFER_REPORT.rules_of``)."""
    return TRANSFER_REPORT.rules_of(options)


def run_transfer_job(cfg: DictConfig, output_dir: Path) -> dict:
    """Train ``cfg.width`` at ``cfg.lr`` for every seed; write ``transfer.parquet`` (``job.json`` is the caller's)."""
    from coordcheck.setup.device import check_precision, resolve_device
    from coordcheck.setup.models import check_width
    from coordcheck.setup.parametrization import short_name
    from coordcheck.run.train import cross_entropy, resolve_seeds
    from coordcheck.transfer.frame import FRAME_NAME, TransferIdentity, write_frame
    from coordcheck.transfer.train import check_data_source, run_cell

    width = check_width(cfg.width)
    lr = positive_number(cfg.lr, "lr")
    diverge = positive_number(cfg.diverge, "diverge")
    device = str(resolve_device(cfg.get("device", "auto")))
    precision = check_precision(cfg.get("precision", "fp32"))
    seeds = resolve_seeds(OmegaConf.to_object(cfg.seeds) if OmegaConf.is_config(cfg.seeds) else cfg.seeds)
    build = instantiate_node(cfg.model, "model")
    experts = cfg.get("experts")
    if experts is not None:  # the number of experts, an axis (coordcheck.setup.experts)
        from coordcheck.setup.experts import with_experts

        build = with_experts(build, experts, str(cfg.get("experts_key", "auto")), bool(cfg.get("granularity", False)))
    parametrization = instantiate_node(cfg.parametrization, "parametrization")
    optimizer = instantiate_node(cfg.optimizer, "optimizer")
    init = instantiate_node(cfg.init, "init") if cfg.get("init") is not None else None
    data = check_data_source(instantiate_node(cfg.data, "data"))
    loss = check_loss(cfg.get("loss"))
    depth = app.job_depth(cfg)
    cid = digest(resolved_config(cfg, NOT_IN_ID))
    identity = TransferIdentity(
        config_id=cid, family_id=cid if cfg.get("depth") is None and experts is None
        else digest(resolved_config(cfg, NOT_IN_FAMILY)),
        depth=depth.depth or 0, experts=experts or 0,
        model=short_name(cfg.model._target_, "coordcheck.setup.models"),
        parametrization=parametrization.name,
        optimizer=short_name(cfg.optimizer._target_, "coordcheck.setup.optim"),
        data=short_name(cfg.data.get("_target_", "custom"), "coordcheck.setup.data").removesuffix("_stream"),
    )
    log.info("width=%d%s lr=%g (2^%.2f) parametrization=%s steps=%s seeds=%s device=%s", width,
             (f" depth={depth.depth} ({depth.scaling.name})" if depth.depth else "")
             + (f" experts={experts}" if experts else ""), lr, math.log2(lr),
             identity.parametrization, cfg.steps, seeds, device)
    frame, facts = run_cell(
        build, width, lr, seeds=seeds, parametrization=parametrization, optimizer=optimizer, data=data,
        steps=cfg.steps, eval_batches=cfg.eval_batches, identity=identity, base_width=cfg.base_width,
        loss_fn=loss or cross_entropy, output=cfg.get("output"), forward_targets=cfg.get("forward_targets", False),
        grad_clip=cfg.get("grad_clip"), diverge=diverge, device=device, precision=precision,
        progress=bool(cfg.progress) and TransferCallback.bar is None,  # under the grid's bar: no bar per job
        init=init, depth=depth,
    )
    write_frame(frame, output_dir / FRAME_NAME)
    held = frame[frame["split"] == "heldout"]["loss"]
    log.info("width=%d lr=%g done: held-out loss %s, %.1f s%s", width, lr,
             ", ".join(f"{x:.4f}" for x in held), facts["seconds"],
             f", diverged: {facts['diverged']}" if facts["diverged"] else "")
    return {"kind": "transfer", "lr": lr, "config_id": identity.config_id, "rows": len(frame), "device": device,
            **facts}


def main(cfg: DictConfig) -> None:
    """Hydra task function (registered in ``coordcheck.transfer.__main__``)."""
    app.execute(cfg, run_transfer_job, lambda c: f"width={c.get('width')}"
                + (f" depth={c.get('depth')}" if c.get("depth") is not None else "") + f" lr={c.get('lr')}",
                hint="one (width, lr) only: sweep the grid for a verdict, python -m coordcheck.transfer --multirun",
                kind="transfer")


def grid_size(config: DictConfig) -> int | None:
    """Jobs in this multirun: the sweeper's params overridden by the command line (as Hydra's basic sweeper does)."""
    try:
        params = {str(k): str(v) for k, v in (OmegaConf.select(config, "hydra.sweeper.params") or {}).items()}
        for line in OmegaConf.select(config, "hydra.overrides.task") or []:
            key, _, value = str(line).partition("=")
            params[key] = value
        n = 1
        for o in OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()]):
            if o.is_sweep_override():
                n *= len(list(o.sweep_string_iterator()))
        return n
    except (HydraException, ValueError, TypeError):
        return None


class TransferCallback(app.SweepCallback):
    """The sweep's callback with the μTransfer report, and a bar over the grid when the jobs run in this process."""

    knobs = TRANSFER_REPORT
    kind = "transfer"
    bar = None

    def report(self, sweep_dir: Path, opts: dict[str, Any]) -> tuple[Any, Path]:
        from coordcheck.transfer.report import report_transfer_sweep

        return report_transfer_sweep(sweep_dir, rules=self.knobs.rules_of(opts), figures=opts["figures"],
                                     size=opts["size"])

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        super().on_multirun_start(config, **kwargs)
        launcher = str(OmegaConf.select(config, "hydra.launcher._target_", default=""))
        if config.get("progress", True) and launcher.endswith("BasicLauncher"):  # other launchers: jobs elsewhere
            from tqdm.auto import tqdm

            TransferCallback.bar = tqdm(total=grid_size(config), desc="μTransfer grid", unit="job")

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if TransferCallback.bar is not None:
            TransferCallback.bar.update(1)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if TransferCallback.bar is not None:
            TransferCallback.bar.close()
            TransferCallback.bar = None
        super().on_multirun_end(config, **kwargs)
