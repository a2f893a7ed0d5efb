"""The Hydra app: one job = one width of the sweep, written to the job's directory.

Stage: orchestration. Input: the composed config (``conf/``). Output, in the job's output
directory: ``frame.parquet`` (the tidy frame) and ``job.json`` (status, error, facts such as
parameter count and seconds), both written atomically, the frame first — so a ``job.json``
saying ``ok`` always has its complete frame beside it. At the end of a multirun,
:class:`SweepCallback` aggregates the frames on disk (whatever launcher ran the jobs).

Failures: a user mistake (:class:`CoordCheckError`) is one line on stderr and exit status 2
in a single run. In a multirun every failure is recorded in that job's ``job.json`` and the
sweep goes on, so one failed width does not lose the others; the command exits 1 at the end.

The ``report.*`` knobs are typed by :data:`ReportOptions` (in Hydra's ConfigStore; its verdict
fields are generated from :class:`coordcheck.verdict.Rules`) and range-checked when the command
line is composed, before any job runs: a bad knob is one line and exit 2. At the end of a
multirun, an exception while making the report is recorded (one line, ``report/error.txt``)
and exits 1 — Hydra alone would make it a warning and exit 0; with ``report.strict=true`` the
verdict sets the exit status (0 pass, 1 fail, 2 inconclusive). See :class:`Outcome`.
"""

from __future__ import annotations

import json
import logging
import operator
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, make_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, List, Optional, get_type_hints

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, InstantiationException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from coordcheck.errors import CoordCheckError
from coordcheck.frame import FRAME_NAME, STATS, atomic_write, digest, write_frame
from coordcheck.report import EXIT, REPORT_DIR
from coordcheck.sweep import JOB_NAME
from coordcheck.verdict import Rules

__all__ = ["run_job", "config_id", "job_hash", "SweepCallback", "JOB_NAME", "CONF_DIR", "safe_dirname", "ReportOptions",
           "report_options", "rules_of", "check_command_line", "compose_config", "Outcome", "OUTCOME", "ERROR_NAME"]

log = logging.getLogger("coordcheck")

REPO_CONF = Path(__file__).resolve().parent.parent / "conf"
CONF_DIR = str(REPO_CONF) if REPO_CONF.is_dir() else "pkg://coordcheck.conf"
NOT_IN_JOB = ("progress", "report", "threads")  # keys that do not change a job's frame
NOT_IN_ID = ("width", "device", *NOT_IN_JOB)  # ... nor what a configuration is (a width on another device is
# the same configuration; its precision is not)


RUN_DEFAULTS = {"device": "auto", "precision": "fp32", "compile": False}  # at these values a key is left out of the
# hashes, so that sweeps made before the keys existed keep their config_id and resume


def _resolved(cfg: DictConfig, without: tuple[str, ...]) -> dict:
    resolved = OmegaConf.to_container(cfg, resolve=True)
    return {k: v for k, v in resolved.items()
            if k not in without and not (k in RUN_DEFAULTS and v == RUN_DEFAULTS[k])}


def check_run(cfg: DictConfig, overrides: list | None = None) -> None:
    """``device``, ``precision`` and ``compile``, checked when the command line is composed (one line, exit 2).

    With another launcher than the basic one (``hydra/launcher=slurm``: jobs run on other machines) the
    device is checked for its form only; the job checks that it exists where it runs."""
    from coordcheck.device import check_compile, check_precision, resolve_device

    remote = any(getattr(o, "key_or_group", None) == "hydra/launcher" for o in overrides or [])
    device = str(cfg.get("device", "auto"))
    if not (remote and re.fullmatch(r"auto|cpu|cuda(:\d+)?", device)):  # remote: its form is right, the job checks
        resolve_device(device)
    check_precision(cfg.get("precision", "fp32"))
    check_compile(cfg.get("compile", False))


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
    from coordcheck.device import check_compile, check_precision, resolve_device
    from coordcheck.models import check_width
    from coordcheck.parametrization import short_name
    from coordcheck.train import RunIdentity, cross_entropy, resolve_seeds, run_width

    width = check_width(cfg.width)
    try:
        lr = float(cfg.lr)
    except (TypeError, ValueError):
        raise CoordCheckError(f"lr must be a positive number, got {cfg.lr!r}") from None
    if not lr > 0:
        raise CoordCheckError(f"lr must be a positive number, got {cfg.lr!r}")
    seeds = resolve_seeds(OmegaConf.to_object(cfg.seeds) if OmegaConf.is_config(cfg.seeds) else cfg.seeds)
    device = resolve_device(cfg.get("device", "auto"))
    precision = check_precision(cfg.get("precision", "fp32"))
    check_compile(cfg.get("compile", False))
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
        "width=%d model=%s parametrization=%s optimizer=%s lr=%g steps=%s seeds=%s base_width=%s device=%s %s",
        width, identity.model, identity.parametrization, identity.optimizer, identity.lr, cfg.steps, seeds,
        cfg.base_width, device, precision,
    )
    loss = cfg.get("loss")
    if loss not in (None, "model"):
        raise CoordCheckError(f"loss must be null (cross-entropy) or model (the loss the model returns), got {loss!r}")
    frame, facts = run_width(
        build, width, seeds=seeds, parametrization=parametrization, optimizer=optimizer, lr=lr,
        batch=batch, steps=cfg.steps, identity=identity, base_width=cfg.base_width,
        tensors=tuple(cfg.tensors), stats=tuple(cfg.stats), progress=bool(cfg.progress),
        loss_fn=loss or cross_entropy, output=cfg.get("output"), forward_targets=cfg.get("forward_targets", False),
        grad_clip=cfg.get("grad_clip"), device=device, precision=precision,
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


def _read_transfer_frame(path: Path):
    from coordcheck.transfer.frame import read_frame

    return read_frame(path)


def _read_coord_frame(path: Path):
    from coordcheck.frame import read_frame

    return read_frame(path)


FRAME_FILES: dict[str, tuple[str, Callable]] = {  # the frame each kind of job writes, and its reader
    "coordcheck": (FRAME_NAME, _read_coord_frame),
    "transfer": ("transfer.parquet", _read_transfer_frame),
}


def finished(output_dir: Path, key: str) -> dict | None:
    """The job.json of a complete job with the same configuration in ``output_dir``, if any (its ``kind``,
    ``coordcheck`` or ``transfer``, says which frame it wrote)."""
    from coordcheck.frame import FrameError

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
    execute(cfg, run_job, lambda c: f"width={c.get('width')}",
            hint="one width only: sweep widths for a verdict, e.g. width=256,512,1024 --multirun")


def execute(cfg: DictConfig, run: Callable[[DictConfig, Path], dict], label: Callable[[DictConfig], str],
            hint: str = "") -> None:
    """One Hydra job of any sweep: resume it if done, else ``run(cfg, output_dir)`` and record ``job.json``.

    ``run`` returns facts about the job (with ``rows``, the frame's length, for resume) after writing its frame;
    ``label(cfg)`` names the job in the log (``width=256``); ``hint`` is logged after a single (non-multirun) job.
    Failures are recorded, never lost (module docstring).
    """
    hc = HydraConfig.get()
    output_dir = Path(hc.runtime.output_dir)
    key = job_hash(cfg)
    if hc.mode == RunMode.MULTIRUN and (done := finished(output_dir, key)) is not None:
        log.info("%s already done with the same configuration (%d rows): skipped", label(cfg), done["rows"])
        return
    job = {"width": cfg.get("width"), "overrides": list(hc.overrides.task), "job_hash": key, "started": time.time()}
    write_json(output_dir / JOB_NAME, {**job, "status": "running"})
    for stale in FRAME_FILES.values():  # a stale frame from another config must not survive
        (output_dir / stale[0]).unlink(missing_ok=True)
    restore = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        restore = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        job["threads"] = set_threads(cfg, hc)
        facts = run(cfg, output_dir)
        write_json(output_dir / JOB_NAME, {**job, "status": "ok", **facts})
        if hc.mode == RunMode.RUN and hint:
            log.info(hint)
    except (Exception, KeyboardInterrupt) as e:
        user = isinstance(e, CoordCheckError)
        error = str(e) if user else f"{type(e).__name__}: {e}"
        status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        write_json(output_dir / JOB_NAME, {
            **job, "status": status, "error": error,
            **({} if user or status == "interrupted" else {"traceback": traceback.format_exc()}),
        })
        log.error("%s %s: %s", label(cfg), status, error)
        if isinstance(e, KeyboardInterrupt):
            raise
        if hc.mode == RunMode.RUN:
            if user:
                print(f"coordcheck: error: {error}", file=sys.stderr)
                sys.exit(2)
            raise
        OUTCOME.failed.append(error)
    finally:
        if restore is not None:
            signal.signal(signal.SIGTERM, restore)


def safe_dirname(name: str) -> str:
    """A job directory name that cannot leave the sweep directory (no separators, no '..').

    Names over 200 characters (many long overrides) are cut and end in a hash of the whole
    name, so two jobs never share a directory.
    """
    cleaned = re.sub(r"[^A-Za-z0-9._,=+@%^-]", "_", str(name)).replace("..", "__").strip(".")
    if len(cleaned) > 200:
        cleaned = f"{cleaned[:183]}-{digest(str(name), length=16)}"
    return cleaned or "job"


if not OmegaConf.has_resolver("coordcheck_dirname"):
    OmegaConf.register_new_resolver("coordcheck_dirname", safe_dirname)


# -- the report knobs ------------------------------------------------------------------------------------------------
# One schema for `report.*` (registered in Hydra's ConfigStore, so the config is typed when it is composed) and for
# the flags of `python -m coordcheck.report`. The verdict's knobs are generated from the fields of verdict.Rules — a
# rule added there is a knob here — followed by the report's own knobs. Ranges the types cannot say are in BOUNDS.

SIZES = ("paper", "slides")  # plot.Size and plot.Layout (plot imports matplotlib: too slow for the config path)
LAYOUTS = ("grid", "guide")


def _choice(name: str, values: tuple[str, ...]) -> type[Enum]:
    return Enum(name, {v: v for v in values}, module=__name__)


Stat, Size, Layout = _choice("Stat", STATS), _choice("Size", SIZES), _choice("Layout", LAYOUTS)
CHOICES: dict[str, type[Enum]] = {"stat": Stat, "size": Size, "layout": Layout}  # knobs with a closed set of values
BOUNDS = {"tol": (">", 0), "shrink_tol": (">", 0), "rise": (">=", 0), "rise_floor": (">=", 0), "min_widths": (">=", 2),
          "min_window": (">=", 1), "persist": (">=", 1), "gross": (">=", 0)}
_COMPARE = {">": operator.gt, ">=": operator.ge}
REPORT_ONLY = (  # (name, type, default) of the report's own knobs
    ("figures", bool, True),
    ("size", Size, Size.paper),
    ("steps", Optional[List[int]], None),
    ("strict", bool, False),
    ("layout", Layout, Layout.grid),
)
KNOB_HELP = {  # one line per knob, for `python -m coordcheck.report --help` (no % signs: argparse formats them)
    "stat": "statistic judged: std (activation std) or l1 (mean |x|, as the mup package)",
    "tol": "max growth slope d log2(stat) / d log2(width)",
    "shrink_tol": "max shrink slope for series that must not vanish (hidden out, every delta)",
    "rise": "instability: loss above (1 + rise) x its running minimum ...",
    "rise_floor": "... and above it by more than this fraction of the step-0 loss",
    "min_widths": "fewer widths than this is inconclusive",
    "min_window": "updated steps the stable window must hold, else inconclusive",
    "persist": "a violation after updates must last this many consecutive judged steps ...",
    "gross": "... unless its whole interval lies more than this beyond the band",
    "figures": "draw the figures (coord_check, slopes, loss)",
    "size": "figure size: a paper column or 16:9 slides",
    "steps": "steps shown in the coord-check figure (null: up to 4 spread over the run)",
    "strict": "exit 1 on fail, 2 when inconclusive, 0 on pass (a CI gate)",
    "layout": "coord-check figure: grid (a panel per step) or guide (a panel per kind of activation, a line per step)",
}


def _rule_knob(f: Any, hints: dict[str, Any], defaults: Rules) -> tuple[str, Any, Any]:
    kind = CHOICES.get(f.name) or (hints[f.name] if hints[f.name] in (bool, int, float, str) else Any)
    default = getattr(defaults, f.name)
    return f.name, kind, field(default=kind(default) if f.name in CHOICES else default)


ReportOptions = make_dataclass(
    "ReportOptions",
    [*(_rule_knob(f, get_type_hints(Rules), Rules()) for f in fields(Rules)),
     *((name, kind, field(default=default)) for name, kind, default in REPORT_ONLY)],
    namespace={"__doc__": "The ``report`` config node: the fields of ``verdict.Rules``, then the report's own knobs."},
)
ReportOptions.__module__ = __name__  # pickled by reference with the config (joblib, submitit)
KNOBS: dict[str, Any] = {f.name: f.type for f in fields(ReportOptions)}
ConfigStore.instance().store(group="schema", name="report", node=ReportOptions)  # conf/config.yaml: /schema/report


def _expected(key: str) -> str:
    """What a knob takes, in words: ``a number > 0``, ``one of paper, slides``, ``true or false``."""
    kind = KNOBS[key]
    if isinstance(kind, type) and issubclass(kind, Enum):
        return "one of " + ", ".join(m.value for m in kind)
    if key == "steps":
        return "null or a list of steps >= 0, e.g. [0,3,10]"
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(kind, "a value")
    return f"{words} {BOUNDS[key][0]} {BOUNDS[key][1]}" if key in BOUNDS else words


def knob_error(key: str, value: Any = None, flag: Callable[[str], str] = "report.{}".format) -> str:
    """One line for a bad knob, named as the user wrote it (``report.tol`` in a sweep, ``--tol`` in the report CLI)."""
    if key not in KNOBS:
        return f"{flag(key)}: unknown knob: choose one of {', '.join(KNOBS)}"
    return f"{flag(key)}: must be {_expected(key)} (got {value!r})"


def report_options(node: Mapping | None = None, flag: Callable[[str], str] = "report.{}".format) -> dict[str, Any]:
    """The report knobs, typed by :class:`ReportOptions` and range-checked, as plain values (choices as strings).

    ``node``: the ``report`` config node, or a mapping of the knobs to set (the rest keep their defaults).
    A bad knob raises :class:`CoordCheckError` naming it with ``flag``.
    """
    if not (node is None or isinstance(node, (Mapping, DictConfig))):
        raise CoordCheckError(f"report: must hold the knobs {', '.join(KNOBS)} (got {node!r})")
    try:
        given = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node or {})
        values = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(ReportOptions), given), enum_to_str=True)
    except OmegaConfBaseException as e:
        raise CoordCheckError(knob_error(str(e.full_key or e.key).removeprefix("report."), e.value, flag)) from None
    for key, (op, bound) in BOUNDS.items():
        if key in values and not _COMPARE[op](values[key], bound):
            raise CoordCheckError(knob_error(key, values[key], flag))
    if any(step < 0 for step in values["steps"] or ()):
        raise CoordCheckError(knob_error("steps", values["steps"], flag))
    return values


def rules_of(options: Mapping[str, Any]) -> Rules:
    """The verdict's :class:`Rules` from report knobs (the fields they share)."""
    return Rules(**{f.name: options[f.name] for f in fields(Rules) if f.name in options})


def _not_in_dirname() -> list[str]:
    """``hydra.job.config.override_dirname.exclude_keys``: what does not change a job's frame does not name its
    directory, so a re-run with other report knobs finds (and resumes) the same jobs."""
    return [*(k for k in NOT_IN_JOB if k != "report"), "device", *(f"report.{k}" for k in KNOBS)]


if not OmegaConf.has_resolver("coordcheck_not_in_dirname"):
    OmegaConf.register_new_resolver("coordcheck_not_in_dirname", _not_in_dirname)


# -- the command line: checked once before Hydra runs anything -------------------------------------------------------

GROUPS = ("model", "data", "parametrization", "optimizer")


def options(group: str) -> list[str]:
    """The options of a config group (``conf/<group>/*.yaml``), from the checkout or the wheel."""
    if CONF_DIR.startswith("pkg://"):
        from importlib import resources

        folder = resources.files("coordcheck.conf").joinpath(group)
        return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


def check_choices(argv: list[str], groups: tuple[str, ...] = GROUPS) -> None:
    """One line for an unknown group option (``model=foo``), before Hydra's multi-line message."""
    for arg in argv:
        m = re.fullmatch(rf"({'|'.join(groups)})=([\w.,-]+)", arg)
        if not m:
            continue
        group, value = m.groups()
        known = options(group)
        for choice in value.split(","):
            if choice and choice not in known:
                raise CoordCheckError(f"unknown {group} {choice!r}: choose one of {', '.join(known)} (conf/{group}/)")



def compose_config(overrides: list[str], config_name: str = "config") -> DictConfig:
    """``conf/<config_name>.yaml`` composed with ``overrides`` (no sweeps), as ``python -m coordcheck`` composes it."""
    from hydra import compose, initialize_config_dir, initialize_config_module

    init = (initialize_config_module(CONF_DIR.removeprefix("pkg://"), version_base="1.3")
            if CONF_DIR.startswith("pkg://") else initialize_config_dir(CONF_DIR, version_base="1.3"))
    with init:
        return compose(config_name, overrides=overrides)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()).split(" Config search path:")[0]  # Hydra's list of search paths: not for users
    override = getattr(e, "override", None)  # a parse error names its override only as an attribute
    return f"cannot parse {override!r}: {text}" if override and override not in text else text


def _is_report(key: str) -> bool:
    return key == "report" or key.startswith("report.")


_FLAGS = {"-m": 0, "--multirun": 0, "-r": 0, "--run": 0, "--resolve": 0, "-c": 1, "--cfg": 1, "-p": 1,
          "--package": 1}  # Hydra's flags that keep the usual config, and how many values each takes


def check_command_line(argv: list[str], *, config_name: str = "config",
                       check: Callable[[DictConfig, list], None] | None = None,
                       report_error: Callable[..., str] | None = knob_error) -> None:
    """Compose the config of ``python -m coordcheck ARGV`` once, so that a bad override is one line, not a traceback.

    Raises :class:`CoordCheckError` for a report knob of the wrong type, out of its range or unknown, a sweep over a
    report knob (a sweep has one report), and any other override Hydra cannot compose. The sweep's other swept
    values are Hydra's to check, job by job. Hydra's flags other than ``--multirun``, ``--run``, ``--cfg``,
    ``--package`` and ``--resolve`` (``-cd``, ``--help``, ...) leave the command line to Hydra, which types the
    report knobs against the same schema.

    ``config_name``, ``check(cfg, overrides)`` and ``report_error(key, value)``: another experiment's config
    (``transfer``), its own checks of the composed config and the parsed overrides, and its knob messages.
    """
    args, values = [], 0  # values: how many of the next arguments are the last flag's value
    for a in argv:
        if values:
            values -= 1
        elif not a.startswith("-"):
            args.append(a)
        elif a.split("=")[0] in _FLAGS:
            values = 0 if "=" in a else _FLAGS[a]
        else:
            return
    try:
        overrides = OverridesParser.create().parse_overrides(args)
    except HydraException as e:
        raise CoordCheckError(_one_line(e)) from None
    for o in overrides:
        if o.is_sweep_override() and o.key_or_group == "device":
            raise CoordCheckError("device: one value per sweep (its jobs share their directories across devices); "
                                  "run one sweep per device")
        if o.is_sweep_override() and _is_report(o.key_or_group):
            hint = ": write a list as [0,3,10]" if o.key_or_group == "report.steps" else ""
            raise CoordCheckError(f"{o.key_or_group}: one value per sweep, its report is made once at the end "
                                  f"(got {o.get_value_string()!r}){hint}")
    try:
        cfg = compose_config([o.input_line for o in overrides if not o.is_sweep_override()], config_name)
    except (HydraException, OmegaConfBaseException) as e:
        cause = e.__cause__ if isinstance(e.__cause__, OmegaConfBaseException) else e
        key = str(getattr(cause, "full_key", "") or "")
        if not _is_report(key) or report_error is None:
            raise CoordCheckError(_one_line(e)) from None
        typed = {o.key_or_group: o.get_value_string() for o in overrides if "=" in (o.input_line or "")}
        value = typed.get(key, getattr(cause, "value", None))
        raise CoordCheckError(report_error(key.removeprefix("report."), value)) from None
    if check is None:
        report_options(cfg.report)
        check_run(cfg, overrides)
    else:
        check(cfg, overrides)


# -- what the command exits with --------------------------------------------------------------------------------------

ERROR_NAME = "error.txt"  # SWEEP_DIR/report/error.txt: why the end of a sweep left no report


@dataclass
class Outcome:
    """What this process saw of a command; its exit status comes from here (``coordcheck.__main__``)."""

    failed: list[str] = field(default_factory=list)  # errors of failed jobs (in this process, and in the report)
    status: str | None = None  # the sweep's verdict, once its report is written
    strict: bool = False  # report.strict: the verdict decides the exit status
    error: str | None = None  # why the sweep has no report
    user_error: bool = False  # ... a user mistake (a report knob)
    exit_table: dict[str, int] = field(default_factory=lambda: dict(EXIT))  # verdict -> exit status, with strict

    @property
    def exit_code(self) -> int:
        """2 for a user mistake; 1 for a failed job or no report; with ``strict``, the verdict's (``report.EXIT``)."""
        if self.error is not None and self.user_error:
            return 2
        if self.failed or self.error is not None:
            return 1
        return self.exit_table[self.status] if self.strict and self.status else 0


OUTCOME = Outcome()  # the CLI starts each command with a fresh one


def run_command(task: Callable[[DictConfig], None], *, config_name: str = "config", groups: tuple[str, ...] = GROUPS,
                check: Callable[[DictConfig, list], None] | None = None,
                report_error: Callable[..., str] | None = knob_error) -> None:
    """A sweep's command line: check it (one line, exit 2), run the Hydra ``task`` on ``conf/<config_name>.yaml``,
    exit with :class:`Outcome`'s status. ``groups``, ``check`` and ``report_error``: :func:`check_choices` and
    :func:`check_command_line`'s."""
    global OUTCOME
    outcome = OUTCOME = Outcome()
    try:
        check_choices(sys.argv[1:], groups)
        check_command_line(sys.argv[1:], config_name=config_name, check=check, report_error=report_error)
    except CoordCheckError as e:
        print(f"coordcheck: error: {e}", file=sys.stderr)
        sys.exit(2)
    import hydra

    hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name)(task)()
    if outcome.failed:
        print(f"coordcheck: {len(outcome.failed)} job(s) failed (see job.json in their directories)", file=sys.stderr)
    elif outcome.strict and outcome.exit_code and outcome.error is None:
        print(f"coordcheck: report.strict=true: {outcome.status.upper()} exits {outcome.exit_code}", file=sys.stderr)
    sys.exit(outcome.exit_code)


def _no_report(sweep_dir: Path | None, e: BaseException, *, user: bool = False) -> None:
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
    """Checks the report knobs before a multirun's first job; judges the job directories on disk at its end."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            report_options(config.get("report"))
        except CoordCheckError as e:  # an exception would only be a warning here: stop before any job runs
            print(f"coordcheck: error: {e}", file=sys.stderr)
            sys.exit(2)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Write ``SWEEP_DIR/report/``. Any exception is recorded and fails the command (Hydra would make it a
        warning and exit 0)."""
        sweep_dir = None
        try:
            sweep_dir = Path(config.hydra.sweep.dir)
            opts = report_options(config.get("report"))
        except CoordCheckError as e:
            return _no_report(sweep_dir, e, user=True)
        except Exception as e:
            return _no_report(sweep_dir, e)
        OUTCOME.strict = opts["strict"]
        try:
            from coordcheck.report import report_sweep

            report, path = report_sweep(sweep_dir, rules=rules_of(opts), figures=opts["figures"],
                                        steps=opts["steps"] or None, size=opts["size"], layout=opts["layout"])
            (path.parent / ERROR_NAME).unlink(missing_ok=True)
            summary = report.summary(path)
        except Exception as e:
            return _no_report(sweep_dir, e)
        OUTCOME.status = report.status
        OUTCOME.failed.extend(p.error for p in report.problems if p.error not in OUTCOME.failed)
        print(*summary, sep="\n")
