"""The gradient-flow command: ``python -m coordcheck.gradflow [overrides]`` (``conf/gradflow.yaml``).

Stage: orchestration. Input: the command line, composed with ``conf/gradflow.yaml`` and the
sweep's config groups (the model is built exactly as the sweep builds it). Output: in the run
directory, ``gradflow.parquet``, ``gradflow.md``, ``gradflow.json`` and ``gradflow.{png,pdf}``;
one printed line per diagnosis; the exit status from ``coordcheck.core.errors.EXIT``: 1 when a
blocking diagnosis fires (CI gate), 0 otherwise, and 2 on a user mistake (one line, before
anything runs when the command line shows it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig

from coordcheck.app.config import CONF_DIR, instantiate_node, job_depth
from coordcheck.core.errors import positive_number
from coordcheck.app.checks import JOB_CHECKS, check_choices, check_command_line, check_values, one_value
from coordcheck.setup.data import as_batch
from coordcheck.setup.device import resolve_device
from coordcheck.core.errors import OK, USER_ERROR, CoordCheckError, check_count, check_flag
from coordcheck.core.frame import atomic_write
from coordcheck.gradflow.checks import Diagnosis, diagnose, exit_code
from coordcheck.gradflow.probe import probe_training
from coordcheck.gradflow.report import write_gradflow_report
from coordcheck.gradflow.schema import FRAME_NAME
from coordcheck.setup.models import check_width
from coordcheck.setup.parametrization import short_name
from coordcheck.run.train import build_on

__all__ = ["run", "main", "cli", "check_overrides"]

PROG = "coordcheck.gradflow"  # what every printed line starts with
_job_exits: list[int] = []  # exit statuses of the jobs run in this process; the CLI exits with the largest


def run(cfg: DictConfig, output_dir: Path) -> tuple[pd.DataFrame, list[Diagnosis], Path]:
    """The CLI's job: build the model exactly as the sweep does, probe ``cfg.steps`` steps, write
    ``gradflow.parquet`` and the report into ``output_dir``."""
    width = check_width(cfg.width)
    lr = positive_number(cfg.lr, "lr")
    device = resolve_device(cfg.get("device", "auto"))
    build = instantiate_node(cfg.model, "model")
    parametrization = instantiate_node(cfg.parametrization, "parametrization")
    factory = instantiate_node(cfg.optimizer, "optimizer")
    data_name = short_name(cfg.data.get("_target_", "custom"), "coordcheck.setup.data")
    batch = as_batch(instantiate_node(cfg.data, "data"), name=data_name)
    init = instantiate_node(cfg.init, "init") if cfg.get("init") is not None else None
    depth = job_depth(cfg)
    parametrization.prepare(depth.builder(build), cfg.base_width)
    model, optimizer = build_on(device, build, width, int(cfg.seed), parametrization, cfg.base_width, factory, lr,
                                init, depth)  # built where it is probed (the batch follows the model), as the sweep
    labels = {"model": short_name(cfg.model._target_, "coordcheck.setup.models"), "parametrization": parametrization.name,
              "width": width, **({"depth": depth.depth} if depth.depth else {}), "optimizer": short_name(cfg.optimizer._target_, "coordcheck.setup.optim"),
              "lr": lr, "seed": int(cfg.seed), "device": str(device)}
    frame = probe_training(model, batch, optimizer=optimizer, steps=cfg.steps, labels=labels)
    diagnoses = diagnose(frame, learning=bool(cfg.learning))
    atomic_write(output_dir / FRAME_NAME, lambda p: frame.to_parquet(p, index=False))
    path = write_gradflow_report(frame, diagnoses, output_dir, figures=bool(cfg.figures))
    return frame, diagnoses, path


def main(cfg: DictConfig) -> None:
    """Hydra task function (``conf/gradflow.yaml``)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        _, diagnoses, path = run(cfg, Path(HydraConfig.get().runtime.output_dir))
    except CoordCheckError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(USER_ERROR)
    for d in diagnoses:
        print(f"{PROG}: {d.line()}")
    if not diagnoses:
        print(f"{PROG}: OK — no diagnosis: gradients reach every layer at a healthy scale")
    print(f"{PROG}: report {path}")
    _job_exits.append(exit_code(diagnoses))


def check_overrides(cfg: DictConfig, overrides: list) -> None:
    """The keys of ``conf/gradflow.yaml`` that can be checked before anything runs, every swept value included
    (the run keys and the targets are checked by ``checks.check_command_line``)."""
    check_values(cfg, overrides, {**{k: JOB_CHECKS[k] for k in ("width", "base_width", "depth", "base_depth", "lr",
                                                                 "steps")},
                                  "seed": one_value(lambda v: check_count(v, "seed", minimum=0), "seed"),
                                  "learning": lambda v: check_flag(v, "learning"),
                                  "figures": lambda v: check_flag(v, "figures")})


def cli() -> None:
    """Exit status: 2 for a user mistake (one line), else 1 when a blocking diagnosis fired, else 0."""
    import hydra

    try:
        check_choices(sys.argv[1:])  # one line for model=foo, before Hydra's multi-line message
        check_command_line(sys.argv[1:], config_name="gradflow", knobs=None, check=check_overrides)
    except CoordCheckError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(USER_ERROR)
    _job_exits.clear()
    hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="gradflow")(main)()
    sys.exit(max(_job_exits, default=OK))
