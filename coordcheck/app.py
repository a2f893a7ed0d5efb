"""The Hydra app: one job = one width of the sweep, written to the job's directory.

Stage: orchestration. Input: the composed config (``conf/``). Output, in the job's output
directory: ``frame.parquet`` (the tidy frame) and ``job.json`` (status, error, facts such as
parameter count and seconds), both written atomically, the frame first — so a ``job.json``
saying ``ok`` always has its complete frame beside it. At the end of a multirun,
:class:`SweepCallback` aggregates the frames on disk (whatever launcher ran the jobs).

Failures: a user mistake (:class:`CoordCheckError`) is one line on stderr and exit status 2
in a single run. In a multirun every failure is recorded in that job's ``job.json`` and the
sweep goes on, so one failed width does not lose the others; the command exits 1 at the end.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from coordcheck.errors import CoordCheckError
from coordcheck.frame import FRAME_NAME, atomic_write, digest, write_frame
from coordcheck.parametrization import short_name
from coordcheck.sweep import JOB_NAME

__all__ = ["run_job", "config_id", "job_hash", "SweepCallback", "JOB_NAME", "CONF_DIR", "safe_dirname"]

log = logging.getLogger("coordcheck")

REPO_CONF = Path(__file__).resolve().parent.parent / "conf"
CONF_DIR = str(REPO_CONF) if REPO_CONF.is_dir() else "pkg://coordcheck.conf"
NOT_IN_JOB = ("progress", "report", "threads")  # keys that do not change a job's frame
NOT_IN_ID = ("width", *NOT_IN_JOB)  # ... nor what a configuration is


def _resolved(cfg: DictConfig, without: tuple[str, ...]) -> dict:
    resolved = OmegaConf.to_container(cfg, resolve=True)
    return {k: v for k, v in resolved.items() if k not in without}


def config_id(cfg: DictConfig) -> str:
    """Short hash of the resolved config without width: the same for every job of a sweep."""
    return digest(_resolved(cfg, NOT_IN_ID))


def _instantiate(node: DictConfig, group: str, **kwargs: Any) -> Any:
    target = node.get("_target_", "?") if isinstance(node, DictConfig) else "?"
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as e:
        cause = e.__cause__ or e
        if isinstance(cause, CoordCheckError):
            raise cause from None
        lines = str(cause).strip().splitlines()
        raise CoordCheckError(
            f"{group}._target_={target} could not be used ({lines[0] if lines else type(cause).__name__}): "
            f"check the dotted path and its arguments"
        ) from None
    except OmegaConfBaseException as e:
        raise CoordCheckError(f"{group}: {str(e).splitlines()[0]} (set it on the command line)") from None


def write_json(path: Path, payload: dict) -> Path:
    text = json.dumps(payload, indent=2, default=str)
    return atomic_write(path, lambda p: p.write_text(text))


def run_job(cfg: DictConfig, output_dir: Path) -> dict:
    """Train ``cfg.width`` for every seed; write ``frame.parquet`` then ``job.json``."""
    import torch  # noqa: F401  (imported here so `--help` and config errors stay fast)

    from coordcheck.data import as_batch
    from coordcheck.models import check_width
    from coordcheck.train import RunIdentity, resolve_seeds, run_width

    width = check_width(cfg.width)
    try:
        lr = float(cfg.lr)
    except (TypeError, ValueError):
        raise CoordCheckError(f"lr must be a positive number, got {cfg.lr!r}") from None
    if not lr > 0:
        raise CoordCheckError(f"lr must be a positive number, got {cfg.lr!r}")
    seeds = resolve_seeds(OmegaConf.to_object(cfg.seeds) if OmegaConf.is_config(cfg.seeds) else cfg.seeds)
    build = _instantiate(cfg.model, "model")
    parametrization = _instantiate(cfg.parametrization, "parametrization")
    optimizer = _instantiate(cfg.optimizer, "optimizer")
    batch = as_batch(_instantiate(cfg.data, "data"), name=short_name(cfg.data.get("_target_", "custom"), "coordcheck.data"))
    identity = RunIdentity(
        config_id=config_id(cfg),
        model=short_name(cfg.model._target_, "coordcheck.models"),
        parametrization=parametrization.name,
        optimizer=short_name(cfg.optimizer._target_, "coordcheck.optim"),
        lr=lr,
        data=batch.name,
        data_policy=batch.policy,
    )
    log.info(
        "width=%d model=%s parametrization=%s optimizer=%s lr=%g steps=%s seeds=%s base_width=%s",
        width, identity.model, identity.parametrization, identity.optimizer, identity.lr, cfg.steps, seeds,
        cfg.base_width,
    )
    frame, facts = run_width(
        build, width, seeds=seeds, parametrization=parametrization, optimizer=optimizer, lr=lr,
        batch=batch, steps=cfg.steps, identity=identity, base_width=cfg.base_width,
        tensors=tuple(cfg.tensors), stats=tuple(cfg.stats), progress=bool(cfg.progress),
    )
    write_frame(frame, output_dir / FRAME_NAME)
    log.info(
        "width=%d done: %d parameters, %d rows, %.1f s%s", width, facts["n_params"], len(frame), facts["seconds"],
        f", diverged: {facts['diverged']}" if facts["diverged"] else "",
    )
    return {"config_id": identity.config_id, "rows": len(frame), **facts}


def job_hash(cfg: DictConfig) -> str:
    """Hash of everything that determines a job's frame (width included): the resume key."""
    return digest(_resolved(cfg, NOT_IN_JOB), length=16)


def finished(output_dir: Path, key: str) -> dict | None:
    """The job.json of a complete job with the same configuration in ``output_dir``, if any."""
    from coordcheck.frame import FrameError, read_frame

    try:
        meta = json.loads((output_dir / JOB_NAME).read_text())
    except (OSError, ValueError):
        return None
    if meta.get("status") != "ok" or meta.get("job_hash") != key:
        return None
    try:
        rows = len(read_frame(output_dir / FRAME_NAME))
    except (FrameError, OSError):
        return None
    return meta if rows == meta.get("rows") else None


def set_threads(cfg: DictConfig, hc: Any) -> int:
    """``threads``: an int, or ``auto`` = this machine's cores split between parallel jobs."""
    import torch

    threads = cfg.get("threads", "auto")
    if threads in (None, "auto"):
        n_jobs = OmegaConf.select(hc, "launcher.n_jobs", default=None)
        if not n_jobs or n_jobs < 1:  # basic launcher (or joblib's -1: one job per core)
            n_jobs = 1 if not n_jobs else os.cpu_count() or 1
        threads = max(1, (os.cpu_count() or 1) // n_jobs) if n_jobs > 1 else torch.get_num_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise CoordCheckError(f"threads must be a positive integer or auto, got {threads!r}")
    torch.set_num_threads(threads)
    return threads


class Interrupted(KeyboardInterrupt):
    """SIGTERM during a job (a scheduler cancelling it): unwound like Ctrl-C, so no partial file stays."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Interrupted(f"terminated by signal {signum}")


def main(cfg: DictConfig) -> None:
    """Hydra task function (registered in ``coordcheck.__main__``)."""
    hc = HydraConfig.get()
    output_dir = Path(hc.runtime.output_dir)
    key = job_hash(cfg)
    if hc.mode == RunMode.MULTIRUN and (done := finished(output_dir, key)) is not None:
        log.info("width=%s already done with the same configuration (%d rows): skipped", cfg.get("width"),
                 done["rows"])
        return
    job = {"width": cfg.get("width"), "overrides": list(hc.overrides.task), "job_hash": key, "started": time.time()}
    write_json(output_dir / JOB_NAME, {**job, "status": "running"})
    (output_dir / FRAME_NAME).unlink(missing_ok=True)  # a stale frame from another config must not survive
    restore = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        restore = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        job["threads"] = set_threads(cfg, hc)
        facts = run_job(cfg, output_dir)
        write_json(output_dir / JOB_NAME, {**job, "status": "ok", **facts})
        if hc.mode == RunMode.RUN:
            log.info("one width only: sweep widths for a verdict, e.g. width=256,512,1024 --multirun")
    except (Exception, KeyboardInterrupt) as e:
        user = isinstance(e, CoordCheckError)
        error = str(e) if user else f"{type(e).__name__}: {e}"
        status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        write_json(output_dir / JOB_NAME, {
            **job, "status": status, "error": error,
            **({} if user or status == "interrupted" else {"traceback": traceback.format_exc()}),
        })
        log.error("width=%s %s: %s", cfg.get("width"), status, error)
        if isinstance(e, KeyboardInterrupt):
            raise
        if hc.mode == RunMode.RUN:
            if user:
                print(f"coordcheck: error: {error}", file=sys.stderr)
                sys.exit(2)
            raise
        FAILED_JOBS.append(error)
    finally:
        if restore is not None:
            signal.signal(signal.SIGTERM, restore)


def safe_dirname(name: str) -> str:
    """A job directory name that cannot leave the sweep directory (no separators, no '..')."""
    cleaned = re.sub(r"[^A-Za-z0-9._,=+@%-]", "_", str(name)).replace("..", "__").strip(".")
    return cleaned[:200] or "job"


if not OmegaConf.has_resolver("coordcheck_dirname"):
    OmegaConf.register_new_resolver("coordcheck_dirname", safe_dirname)


FAILED_JOBS: list[str] = []  # failures of in-process jobs; the CLI exits 1 when any


class SweepCallback(Callback):
    """At the end of a multirun, aggregate the job directories on disk."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from coordcheck.report import report_sweep
        from coordcheck.verdict import Rules

        sweep_dir = Path(config.hydra.sweep.dir)
        opts = config.get("report") or {}
        rules = Rules(**{k: opts[k] for k in ("stat", "tol", "shrink_tol", "rise", "rise_floor") if k in opts})
        try:
            report, path = report_sweep(sweep_dir, rules=rules, figures=bool(opts.get("figures", True)),
                                        steps=list(opts["steps"]) if opts.get("steps") else None,
                                        size=str(opts.get("size", "paper")))
        except CoordCheckError as e:
            print(f"coordcheck: no report: {e}", file=sys.stderr)
            FAILED_JOBS.append(str(e))
            return
        FAILED_JOBS.extend(p.error for p in report.problems if p.error not in FAILED_JOBS)
        print(*report.summary(path), sep="\n")
