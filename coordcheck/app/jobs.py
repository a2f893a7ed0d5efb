"""The Hydra app: one job = one width of the sweep, written to the job's directory.

Stage: orchestration. Input: the composed config (``conf/``). Output, in the job's output
directory: ``frame.parquet`` (the tidy frame) and ``job.json`` (status, error, facts such as
parameter count and seconds), both written atomically, the frame first — so a ``job.json``
saying ``ok`` always has its complete frame beside it. At the end of a multirun,
:class:`SweepCallback` aggregates the frames on disk (whatever launcher ran the jobs).

Failures: a mistake the command line shows (any value a key takes, swept or not; a ``_target_``
that cannot be imported; a sweep without ``--multirun``) is one line and exit status 2 before any
job runs (:func:`run_command`, ``checks.check_command_line``). What only a job can see is, in a
single run, one line on stderr (kept in the job's log file, not repeated on the console) and exit 2.
In a multirun every failure is recorded in that job's ``job.json`` and the sweep goes on, so one
failed width does not lose the others; the command exits 1 at the end.

The ``report.*`` knobs are typed by :data:`ReportOptions` (in Hydra's ConfigStore; its verdict
fields are generated from :class:`coordcheck.judge.verdict.Rules`) and range-checked when the command
line is composed, before any job runs: a bad knob is one line and exit 2. At the end of a
multirun, an exception while making the report is recorded (one line, ``report/error.txt``)
and exits 1 — Hydra alone would make it a warning and exit 0; with ``report.strict=true`` the
verdict sets the exit status (0 pass, 1 fail, 2 inconclusive). See :class:`Outcome`.

With ``logger=...`` (``conf/logger/``, :mod:`coordcheck.loggers`) each job, once its ``job.json`` is written, and
the sweep's end, once its report is written, are logged to experiment trackers; a tracker that fails is one line,
and with its ``strict: true`` the command exits 1.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from coordcheck.app.overrides import multirun_last
from coordcheck.app.ranks import end_group, other_rank_dirs, parallel_rank, rank0_decides, rank_job_dir, rank_outcome
from coordcheck.core.processes import process_rank
from coordcheck.app.checks import (  # noqa: F401  (check_*: re-exported, users' scripts import them from here)
    check_choices, check_command_line, check_jobs, check_run,
)
from coordcheck.app.config import (  # noqa: F401  (CONF_DIR ... RUN_DEFAULTS: re-exported, as above)
    CONF_DIR, GROUPS, NOT_IN_FAMILY, NOT_IN_ID, NOT_IN_JOB, REPO_CONF, RUN_DEFAULTS, compose_config, instantiate_node,
    job_depth, options, resolved_config, safe_dirname,
)
from coordcheck.core.errors import EXIT, USER_ERROR, CoordCheckError, check_loss, check_threads, positive_number
from coordcheck.core.frame import (
    FRAME_NAME,
    FrameError,
    atomic_write,
    digest,
    read_frame,
    write_frame,
)
from coordcheck.report.common import ERROR_NAME, REPORT_DIR
from coordcheck.report.knobs import (  # noqa: F401  (KNOBS ... Stat: re-exported, as above)
    KNOBS, LAYOUTS, REPORT, SIZES, Knobs, Layout, ReportOptions, Size, Stat, knob_error, report_options, rules_of,
)
from coordcheck.run.sweep import JOB_NAME
from coordcheck.core.text import write_json

__all__ = ["run_job", "config_id", "family_id", "job_depth", "job_hash", "SweepCallback", "JOB_NAME", "CONF_DIR",
           "safe_dirname", "ReportOptions",
           "report_options", "rules_of", "check_command_line", "compose_config", "Outcome", "OUTCOME", "ERROR_NAME"]

log = logging.getLogger("coordcheck")


def config_id(cfg: DictConfig) -> str:
    """Short hash of the resolved config without width: the same for every job of a width sweep."""
    return digest(resolved_config(cfg, NOT_IN_ID))


def family_id(cfg: DictConfig) -> str:
    """Short hash of the resolved config without width and depth: the same for every job of a depth sweep (the
    configurations that differ only in depth); ``config_id`` when no depth is set."""
    if cfg.get("depth") is None and cfg.get("experts") is None:
        return config_id(cfg)
    return digest(resolved_config(cfg, NOT_IN_FAMILY))


def run_job(cfg: DictConfig, output_dir: Path) -> dict:
    """Train ``cfg.width`` for every seed; write ``frame.parquet`` (the caller writes ``job.json``).

    """
    import torch  # noqa: F401  (imported here so `--help` and config errors stay fast)

    from coordcheck.setup.data import as_batch, batch_for
    from coordcheck.setup.device import check_compile, check_precision, resolve_device
    from coordcheck.setup.models import check_width
    from coordcheck.setup.parametrization import model_batch, short_name
    from coordcheck.run.train import RunIdentity, cross_entropy, resolve_seeds, run_width

    width = check_width(cfg.width)
    lr = positive_number(cfg.lr, "lr")
    seeds = resolve_seeds(OmegaConf.to_object(cfg.seeds) if OmegaConf.is_config(cfg.seeds) else cfg.seeds)
    device = resolve_device(cfg.get("device", "auto"))
    precision = check_precision(cfg.get("precision", "fp32"))
    check_compile(cfg.get("compile", False))
    build = instantiate_node(cfg.model, "model")
    parallel = instantiate_node(cfg.parallel, "parallel") if cfg.get("parallel") is not None else None
    experts = cfg.get("experts")
    if experts is not None:  # the number of experts, an axis (coordcheck.setup.experts, judge.experts)
        from coordcheck.setup.experts import with_experts

        build = with_experts(build, experts, str(cfg.get("experts_key", "auto")), bool(cfg.get("granularity", False)))
    parametrization = instantiate_node(cfg.parametrization, "parametrization")
    optimizer = instantiate_node(cfg.optimizer, "optimizer")
    init = instantiate_node(cfg.init, "init") if cfg.get("init") is not None else None
    data = instantiate_node(cfg.data, "data")
    if getattr(data, "func", None) is batch_for:  # data/custom.yaml's default: read off the model
        batch, said = model_batch(build, width, cfg.base_width)
        log.info("data: %s (read off the model; pass data= to choose)", said)
    else:
        if isinstance(data, functools.partial):  # data=custom with a _target_ of the user's: still partial, call it
            data = data()
        batch = as_batch(data, name=short_name(cfg.data.get("_target_", "custom"), "coordcheck.setup.data"))
    depth = job_depth(cfg)
    identity = RunIdentity(
        config_id=config_id(cfg), family_id=family_id(cfg), depth=depth.depth or 0, experts=experts or 0,
        model=short_name(cfg.model._target_, "coordcheck.setup.models"),
        parametrization=parametrization.name,
        optimizer=short_name(cfg.optimizer._target_, "coordcheck.setup.optim"),
        lr=lr,
        data=batch.name,
        data_policy=batch.policy,
    )
    log.info(
        "width=%d%s model=%s parametrization=%s optimizer=%s lr=%g steps=%s seeds=%s base_width=%s device=%s %s",
        width, (f" depth={depth.depth} ({depth.scaling.name})" if depth.depth else "")
        + (f" experts={experts}" if experts else ""), identity.model, identity.parametrization, identity.optimizer,
        identity.lr, cfg.steps, seeds, cfg.base_width, device, precision,
    )
    loss = check_loss(cfg.get("loss"))
    frame, facts = run_width(
        build, width, seeds=seeds, parametrization=parametrization, optimizer=optimizer, lr=lr,
        batch=batch, steps=cfg.steps, identity=identity, base_width=cfg.base_width,
        tensors=tuple(cfg.tensors), stats=tuple(cfg.stats),
        progress=bool(cfg.progress),
        loss_fn=loss or cross_entropy, output=cfg.get("output"), forward_targets=cfg.get("forward_targets", False),
        grad_clip=cfg.get("grad_clip"), device=device, precision=precision, init=init, depth=depth,
        pool_experts=bool(cfg.get("pool_experts", True)), parallel=parallel,
    )
    write_frame(frame, output_dir / FRAME_NAME)
    log.info(
        "width=%d done: %d parameters, %d rows, %.1f s%s", width, facts["n_params"], len(frame), facts["seconds"],
        f", diverged: {facts['diverged']}" if facts["diverged"] else "",
    )
    return {"config_id": identity.config_id, "rows": len(frame), **facts}


def job_hash(cfg: DictConfig) -> str:
    """Hash of everything that determines a job's frame (width included): the resume key."""
    return digest(resolved_config(cfg, NOT_IN_JOB), length=16)


# The frame each kind of job writes, and its reader: the coordinate check's here; another experiment that runs its jobs
# through execute() adds its own when it is imported (coordcheck.transfer.app: "transfer").
FRAME_FILES: dict[str, tuple[str, Callable]] = {"coordcheck": (FRAME_NAME, read_frame)}


def finished(output_dir: Path, key: str) -> dict | None:
    """The job.json of a complete job with the same configuration in ``output_dir``, if any (its ``kind``,
    ``coordcheck`` or ``transfer``, says which frame it wrote: :data:`FRAME_FILES`)."""
    try:
        meta = json.loads((output_dir / JOB_NAME).read_text())
    except (OSError, ValueError):
        return None
    if meta.get("status") != "ok" or meta.get("job_hash") != key:
        return None
    name, read = FRAME_FILES.get(meta.get("kind", "coordcheck"), FRAME_FILES["coordcheck"])
    try:
        rows = len(read(output_dir / name))
    except (FrameError, OSError):
        return None
    return meta if rows == meta.get("rows") else None


def set_threads(cfg: DictConfig, hc: Any) -> int:
    """``threads``: an int, or ``auto`` = this machine's cores split between parallel jobs."""
    import torch

    threads = check_threads(cfg.get("threads", "auto"))
    if threads is None:
        n_jobs = OmegaConf.select(hc, "launcher.n_jobs", default=None)
        if not n_jobs or n_jobs < 1:  # basic launcher (or joblib's -1: one job per core)
            n_jobs = 1 if not n_jobs else os.cpu_count() or 1
        threads = max(1, (os.cpu_count() or 1) // n_jobs) if n_jobs > 1 else torch.get_num_threads()
    torch.set_num_threads(threads)
    return threads


class Interrupted(KeyboardInterrupt):
    """SIGTERM during a job (a scheduler cancelling it): unwound like Ctrl-C, so no partial file stays."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Interrupted(f"terminated by signal {signum}")


def main(cfg: DictConfig) -> None:
    """Hydra task function (registered in ``coordcheck.__main__``)."""
    execute(cfg, run_job, lambda c: f"width={c.get('width')}",
            hint="one width only: sweep widths for a verdict, e.g. width=256,512,1024 --multirun")


def execute(cfg: DictConfig, run: Callable[[DictConfig, Path], dict], label: Callable[[DictConfig], str],
            hint: str = "", kind: str = "coordcheck") -> None:
    """One Hydra job of any sweep: resume it if done, else ``run(cfg, output_dir)`` and record ``job.json``.

    ``run`` returns facts about the job (with ``rows``, the frame's length, for resume) after writing its frame;
    ``label(cfg)`` names the job in the log (``width=256``); ``hint`` is logged after a single (non-multirun) job.
    Failures are recorded, never lost (module docstring). Then the trackers of ``cfg.logger`` get the job (its
    ``kind``'s frame, :func:`log_job`).
    """
    hc = HydraConfig.get()
    output_dir = Path(hc.runtime.output_dir)
    key = job_hash(cfg)
    done = finished(output_dir, key) if hc.mode == RunMode.MULTIRUN else None
    try:
        done = rank0_decides(cfg, done)  # under parallel: every process resumes (or runs) the job as rank 0 does
    except CoordCheckError as e:  # (outside torchrun / Slurm's tasks: every job would say it) one line, the end
        print(f"coordcheck: error: {e}", file=sys.stderr)
        sys.exit(USER_ERROR)
    if done is not None:
        log.info("%s already done with the same configuration (%d rows): skipped", label(cfg), done["rows"])
        return
    output_dir, drop = rank_job_dir(cfg, output_dir)  # under parallel only rank 0 writes the job's files (app.ranks)
    job = {"width": cfg.get("width"), "overrides": list(hc.overrides.task), "job_hash": key, "started": time.time()}
    write_json(output_dir / JOB_NAME, {**job, "status": "running"})
    for stale in [*(name for name, _ in FRAME_FILES.values()), "frame.causes.parquet"]:  # from another config: gone
        (output_dir / stale).unlink(missing_ok=True)
    restore = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        restore = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        job["threads"] = set_threads(cfg, hc)
        facts = run(cfg, output_dir)
        write_json(output_dir / JOB_NAME, record := {**job, "status": "ok", **facts})
        log_job(cfg, hc, output_dir, kind, record)
        if hc.mode == RunMode.RUN and hint:
            log.info(hint)
    except (Exception, KeyboardInterrupt) as e:
        if restore is not None:  # a second SIGTERM (torchrun stops every process) must not cut the record short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        user = isinstance(e, CoordCheckError)
        error = str(e) if user else f"{type(e).__name__}: {e}"
        status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        if parallel_rank(cfg) is not None:  # what broke it, if another process did (or said why it failed)
            status, error = rank_outcome(cfg, label(cfg), status, error)
        write_json(output_dir / JOB_NAME, record := {
            **job, "status": status, "error": error,
            **({} if user or status == "interrupted" else {"traceback": traceback.format_exc()}),
        })
        if status != "interrupted":
            log_job(cfg, hc, output_dir, kind, record)
        if hc.mode == RunMode.RUN and user and not isinstance(e, KeyboardInterrupt):
            _log_to_file(logging.ERROR, "%s %s: %s", label(cfg), status, error)  # the console: one line, below
            print(f"coordcheck: error: {error}", file=sys.stderr)
            sys.exit(USER_ERROR)
        log.error("%s %s: %s", label(cfg), status, error)
        if parallel_rank(cfg) is not None:  # the others wait in a collective: end this process, torchrun stops them
            print(f"coordcheck: rank {parallel_rank(cfg)}: {label(cfg)} {status}: {error}", file=sys.stderr,
                  flush=True)
            raise SystemExit(1) from None
        if isinstance(e, KeyboardInterrupt) or hc.mode == RunMode.RUN:
            raise
        OUTCOME.failed.append(error)
    finally:
        if restore is not None:
            signal.signal(signal.SIGTERM, restore)
        drop()


def log_job(cfg: DictConfig, hc: Any, output_dir: Path, kind: str, record: dict) -> None:
    """The job to the trackers of ``cfg.logger`` (:mod:`coordcheck.loggers`), after its ``job.json``: a failing
    tracker is one line, and a strict one's error goes into ``job.json`` (``tracker_errors``) and the exit status."""
    loggers = cfg.get("logger")
    if not loggers:
        return
    from coordcheck.loggers import log_job as to_trackers

    root = Path(hc.sweep.dir) if hc.mode == RunMode.MULTIRUN else output_dir
    try:
        try:
            config = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
        except Exception:  # noqa: BLE001  (the job ran with it: an interpolation only Hydra resolves is no reason)
            config = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
        config = {k: v for k, v in config.items() if k != "logger"}
        errors = to_trackers(OmegaConf.to_container(loggers, resolve=True), kind, output_dir, root, config)
    except Exception as e:  # noqa: BLE001  (the job is done and recorded: the trackers must not undo that)
        log.warning("trackers: job %s not logged: %s: %s", output_dir.name, type(e).__name__, e)
        return
    if errors:
        write_json(output_dir / JOB_NAME, {**record, "tracker_errors": errors})
        OUTCOME.trackers.extend(e for e in errors if e not in OUTCOME.trackers)


def _log_to_file(level: int, msg: str, *args: Any) -> None:
    """``log.log(level, msg, *args)`` to the log files only (the job's ``coordcheck.log``), not the console."""
    record = log.makeRecord(log.name, level, __file__, 0, msg, args, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and record.levelno >= handler.level:
            handler.handle(record)


# -- what the command exits with --------------------------------------------------------------------------------------



@dataclass
class Outcome:
    """What this process saw of a command; its exit status comes from here (``coordcheck.__main__``)."""

    failed: list[str] = field(default_factory=list)  # errors of failed jobs (in this process, and in the report)
    status: str | None = None  # the sweep's verdict, once its report is written
    strict: bool = False  # report.strict: the verdict decides the exit status
    error: str | None = None  # why the sweep has no report
    user_error: bool = False  # ... a user mistake (a report knob)
    trackers: list[str] = field(default_factory=list)  # errors of strict trackers (logger.*.strict=true)

    @property
    def exit_code(self) -> int:
        """2 for a user mistake; 1 for a failed job, no report or a strict tracker's error; with ``strict``, the
        verdict's (``errors.EXIT``)."""
        if self.error is not None and self.user_error:
            return 2
        if self.failed or self.error is not None or self.trackers:
            return 1
        return EXIT[self.status] if self.strict and self.status else 0


OUTCOME = Outcome()  # the CLI starts each command with a fresh one


def run_command(task: Callable[[DictConfig], None], *, config_name: str = "config", groups: tuple[str, ...] = GROUPS,
                check: Callable[[DictConfig, list], None] | None = check_jobs,
                knobs: Knobs | None = REPORT) -> None:
    """A sweep's command line: check it (one line, exit 2, before any job runs), run the Hydra ``task`` on
    ``conf/<config_name>.yaml``, exit with :class:`Outcome`'s status. ``groups``, ``check`` and ``knobs``:
    :func:`check_choices` and :func:`check_command_line`'s (the coordinate check's by default)."""
    global OUTCOME
    outcome = OUTCOME = Outcome()
    sys.argv[1:] = multirun_last(sys.argv[1:])  # --multirun anywhere: after the overrides for Hydra's argparse
    try:
        check_choices(sys.argv[1:], groups)
        check_command_line(sys.argv[1:], config_name=config_name, check=check, knobs=knobs)
    except CoordCheckError as e:
        print(f"coordcheck: error: {e}", file=sys.stderr)
        sys.exit(USER_ERROR)
    import hydra

    scratch = other_rank_dirs()  # under torchrun, a process other than rank 0 writes into a scratch directory
    try:
        hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name)(task)()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        end_group()
    if outcome.failed:
        print(f"coordcheck: {len(outcome.failed)} job(s) failed (see job.json in their directories)", file=sys.stderr)
    elif outcome.trackers:
        print(f"coordcheck: {len(outcome.trackers)} tracker error(s) with strict: true, first: {outcome.trackers[0]}",
              file=sys.stderr)
    elif outcome.strict and outcome.exit_code and outcome.error is None:
        print(f"coordcheck: report.strict=true: {outcome.status.upper()} exits {outcome.exit_code}", file=sys.stderr)
    sys.exit(outcome.exit_code)


def no_report(sweep_dir: Path | None, e: BaseException, *, user: bool = False) -> None:
    """Record why a sweep has no report: one line on stderr, ``report/error.txt`` (with the traceback), and a
    non-zero exit. A report left by an earlier run is removed: it must not read as this sweep's verdict."""
    first = (str(e).strip().splitlines() or [""])[0]
    error = first if isinstance(e, CoordCheckError) else f"{type(e).__name__}: {first}".removesuffix(": ")
    print(f"coordcheck: no report: {error}", file=sys.stderr)
    OUTCOME.error, OUTCOME.user_error = error, user
    if sweep_dir is None:
        return
    out = sweep_dir / REPORT_DIR
    try:
        out.mkdir(parents=True, exist_ok=True)
        for stale in ("report.json", "report.md", "transfer.json", "transfer.md"):
            (out / stale).unlink(missing_ok=True)
        text = error + "\n" + ("" if user else "\n" + "".join(traceback.format_exception(e)))
        atomic_write(out / ERROR_NAME, lambda p: p.write_text(text))
    except OSError as oe:
        print(f"coordcheck: could not write {out / ERROR_NAME}: {oe}", file=sys.stderr)


class SweepCallback(Callback):
    """Checks the report knobs before a multirun's first job; judges the job directories on disk at its end.

    ``knobs`` and :meth:`report`: the experiment's report schema and report function (the μTransfer sweep's
    callback is this one with its own)."""

    knobs: Knobs = REPORT
    kind = "coordcheck"  # the trackers' name for the experiment (coordcheck.loggers.content.KINDS)

    def report(self, sweep_dir: Path, opts: dict[str, Any]) -> tuple[Any, Path]:
        """Write the report of ``sweep_dir`` with the checked knobs ``opts``; return it and its path."""
        from coordcheck.report import report_sweep

        return report_sweep(sweep_dir, rules=self.knobs.rules_of(opts), figures=opts["figures"],
                            steps=opts["steps"] or None, size=opts["size"], layout=opts["layout"])

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.started = time.time()  # the trackers' errors of this sweep's jobs, not of a resumed one's (log_sweep)
        self.parallel = (config.get("parallel") or {}).get("name", "none") != "none"  # then rank 0 alone reports
        try:
            self.knobs.values(config.get("report"))
        except CoordCheckError as e:  # an exception would only be a warning here: stop before any job runs
            print(f"coordcheck: error: {e}", file=sys.stderr)
            sys.exit(USER_ERROR)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Write ``SWEEP_DIR/report/``. Any exception is recorded and fails the command (Hydra would make it a
        warning and exit 0)."""
        sweep_dir = None
        if getattr(self, "parallel", False) and process_rank() != 0:
            return  # rank 0 reports (every process holds the same frames)
        try:
            sweep_dir = Path(config.hydra.sweep.dir)
            opts = self.knobs.values(config.get("report"))
        except CoordCheckError as e:
            return no_report(sweep_dir, e, user=True)
        except Exception as e:
            return no_report(sweep_dir, e)
        OUTCOME.strict = opts["strict"]
        try:
            report, path = self.report(sweep_dir, opts)
            (path.parent / ERROR_NAME).unlink(missing_ok=True)
            summary = report.summary(path)
        except Exception as e:
            return no_report(sweep_dir, e)
        OUTCOME.status = report.status
        OUTCOME.failed.extend(p.error for p in report.problems if p.error not in OUTCOME.failed)
        print(*summary, sep="\n")
        self.log_sweep(config, sweep_dir, path.parent)

    def log_sweep(self, config: DictConfig, sweep_dir: Path, report_dir: Path) -> None:
        """The sweep's end to the trackers of ``config.logger``, after the report is written; strict trackers' errors
        (this one's and the jobs', from their ``job.json``) set the exit status."""
        loggers = config.get("logger")
        if not loggers:
            return
        from coordcheck.loggers import log_sweep

        try:
            errors = log_sweep(OmegaConf.to_container(loggers, resolve=True), self.kind, sweep_dir, report_dir)
        except Exception as e:  # noqa: BLE001  (the report is written: the trackers must not undo that)
            log.warning("trackers: the sweep's end not logged: %s: %s", type(e).__name__, e)
            errors = []
        for path in sorted(sweep_dir.glob(f"*/{JOB_NAME}")):  # jobs that ran in other processes (joblib, submitit)
            try:
                meta = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if meta.get("started", 0) >= getattr(self, "started", 0):  # this sweep's, not a finished job resumed
                errors += meta.get("tracker_errors", [])
        OUTCOME.trackers.extend(e for e in errors if e not in OUTCOME.trackers)
