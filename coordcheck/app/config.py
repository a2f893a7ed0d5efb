"""The configuration layer: from ``conf/`` to a composed config, a job's identity and the objects its groups name.

Stage: app, shared by every command line (the coordinate check, the gradient-flow probe, the μTransfer sweep). Input:
``conf/*.yaml`` (the checkout's, or the wheel's ``coordcheck.conf``) and overrides. Output: a composed config
(:func:`compose_config`), its resolved values without the keys that do not make a configuration
(:func:`resolved_config`: the hashes of ``config_id``, ``family_id`` and the resume key), the objects its groups name
(:func:`instantiate_node`), a job's depth (:func:`job_depth`), the groups and their options, and the resolvers the
YAML files use (``coordcheck_dirname``, ``coordcheck_not_in_dirname``; ``cc.ratio`` and ``cc.head_dim`` for
width-dependent model fields). The checks of a command line before anything runs: :mod:`coordcheck.app.checks`; the
``report.*`` knobs' schema: :mod:`coordcheck.report.knobs`. Nothing here imports torch at import time.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from enum import Enum
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from coordcheck.core.errors import (
    CoordCheckError, check_width,
)
from coordcheck.core.frame import digest
from coordcheck.core.targets import locate
from coordcheck.report.knobs import (  # noqa: F401  (re-exported: their home was here)
    KNOBS, LAYOUTS, REPORT, SIZES, Knobs, Layout, ReportOptions, Size, Stat, cli_flag, knob_error, report_options,
    rules_of,
)

__all__ = ["CONF_DIR", "GROUPS", "NOT_IN_JOB", "NOT_IN_ID", "NOT_IN_FAMILY", "RUN_DEFAULTS", "resolved_config",
           "instantiate_node", "safe_dirname", "job_depth", "not_in_dirname", "options", "logger_keys",
           "compose_config", "hydra_context"]

REPO_CONF = Path(__file__).resolve().parents[2] / "conf"
CONF_DIR = str(REPO_CONF) if REPO_CONF.is_dir() else "pkg://coordcheck.conf"
NOT_IN_JOB = ("progress", "report", "threads", "logger")  # keys that do not change a job's frame
NOT_IN_ID = ("width", "device", "parallel", *NOT_IN_JOB)  # ... nor what a configuration is (a width on another
# device, or over several processes, is the same configuration; its precision is not). A depth is part of a
# configuration: each depth of a depth sweep is one configuration of the width verdict, and the depths of one
# configuration share its family_id (NOT_IN_FAMILY).
NOT_IN_FAMILY = ("depth", "experts", *NOT_IN_ID)  # (the number of experts is an axis too: coordcheck.judge.experts)


RUN_DEFAULTS = {"device": "auto", "precision": "fp32", "compile": False,
                "init": {"_target_": "coordcheck.setup.init.as_built", "_partial_": True},
                "depth": None, "base_depth": 2, "depth_key": "auto", "experts": None, "experts_key": "auto",
                "granularity": False, "pool_experts": True,
                "parallel": {"_target_": "coordcheck.setup.parallel.Parallel", "name": "none", "timeout_s": 300},
                "depth_scaling": {"_target_": "coordcheck.setup.depth.DepthScaling", "name": "none",
                                  "alpha": 0.0}}  # at these values a key is left
# out of the hashes, so that sweeps made before the keys existed keep their config_id and resume (init: conf/init/none)


def resolved_config(cfg: DictConfig, without: tuple[str, ...]) -> dict:
    """The resolved config as plain values without the keys ``without`` (and the run keys at their defaults).

    Without ``width`` (a configuration's identity, the same at every width), the values that follow the width
    (``${cc.ratio:}``, ``${cc.head_dim:-1}``, ``${width}``) are resolved at ``base_width``, so that they do not
    make each width a configuration of its own."""
    base = cfg.get("base_width") if "width" in without and "width" in cfg else None
    if isinstance(base, int) and not isinstance(base, bool):
        cfg = cfg.copy()
        with open_dict(cfg):
            cfg.width = base
    resolved = OmegaConf.to_container(cfg, resolve=True)
    return {k: v for k, v in resolved.items()
            if k not in without and not (k in RUN_DEFAULTS and v == RUN_DEFAULTS[k])}


def instantiate_node(node: DictConfig, group: str, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate(node)``; a bad ``_target_`` or a missing value is one line naming ``group``."""
    target = node.get("_target_", "?") if isinstance(node, DictConfig) else "?"
    if isinstance(node, DictConfig) and not OmegaConf.is_missing(node, "_target_") and isinstance(target, str):
        locate(target, f"{group}._target_")  # one line that says why it cannot be imported
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


def safe_dirname(name: str) -> str:
    """A job directory name that cannot leave the sweep directory (no separators, no '..').

    Names over 200 characters (many long overrides) are cut and end in a hash of the whole
    name, so two jobs never share a directory.
    """
    cleaned = re.sub(r"[^A-Za-z0-9._,=+@%^-]", "_", str(name)).replace("..", "__").strip(".")
    if len(cleaned) > 200:
        cleaned = f"{cleaned[:183]}-{digest(str(name), length=16)}"
    return cleaned or "job"


def job_depth(cfg: DictConfig) -> Any:
    """The job's :class:`coordcheck.setup.depth.Depth` from ``depth``, ``base_depth``, ``depth_key`` and
    ``depth_scaling``
    (every experiment's job builds its model through it; torch is imported here, not with this module)."""
    from coordcheck.setup.depth import Depth, NO_DEPTH_SCALING

    node = cfg.get("depth_scaling")
    scaling = instantiate_node(node, "depth_scaling") if node is not None else NO_DEPTH_SCALING
    return Depth(depth=cfg.get("depth"), base_depth=cfg.get("base_depth", 2), scaling=scaling,
                 key=str(cfg.get("depth_key", "auto")))


def width_ratio(power: float = 1, *, _root_: DictConfig) -> float:
    """``${cc.ratio:}``: the job's width / base_width (muP's width multiplier); ``${cc.ratio:-1}`` its inverse, any
    power alike. For width-dependent fields written in YAML (``logits_scaling: ${cc.ratio:}``)."""
    return float((check_width(_root_.width) / check_width(_root_.base_width, key="base_width")) ** power)


def head_dim(power: float = 1, *, _root_: DictConfig) -> float:
    """``${cc.head_dim:}``: the attention head dimension at the job's width, ``${cc.head_dim:-1}`` = 1/head_dim (muP's
    attention scale), ``${cc.head_dim:-0.5}`` = 1/sqrt(head_dim) (the standard one). From ``model.grows``:
    ``head_dim`` (the default: ``model.n_head`` heads, width / n_head) or ``heads`` (``model.head_dim`` fixed)."""
    model = _root_.get("model") or {}
    if model.get("grows", "head_dim") == "heads":
        dim = model.get("head_dim")
    else:
        n_head = model.get("n_head")
        dim = check_width(_root_.width) / n_head if n_head else None
    if not dim or dim <= 0:
        raise CoordCheckError("${cc.head_dim:} needs model.n_head (or model.grows=heads and model.head_dim)")
    return float(dim ** power)


def not_in_dirname(knobs: Knobs = REPORT) -> list[str]:
    """``hydra.job.config.override_dirname.exclude_keys`` (its resolver): what does not change a job's frame does not
    name its directory (the run keys, ``device``, every report knob of ``knobs``, the trackers' settings), so a
    re-run with other report knobs finds (and resumes) the same jobs."""
    return [*(k for k in NOT_IN_JOB if k != "report"), "device", *(f"report.{k}" for k in knobs.kinds),
            *logger_keys()]


def help_groups(*, _root_: DictConfig) -> str:
    """``--help``'s config groups (``conf/hydra/help/coordcheck.yaml``): the groups of the command's defaults list
    (``hydra.runtime.choices``; not ``schema/``, which only types ``report.*``, nor a group this command does not
    take), each with its options and the default marked, then the ``+experiment=`` overlays and, for a command whose
    multirun ends in a report (a ``hydra.callbacks`` entry), the launchers. One line per group:
    ``model: custom, gpt (default), hf, mlp``."""
    choices = OmegaConf.to_container(_root_.hydra.runtime.choices)
    lines = [f"{group}: " + ", ".join(f"{o} (default)" if o == choice else o for o in options(group))
             + (" (default: none)" if choice is None else "")
             for group, choice in choices.items() if not group.startswith("hydra/")]
    lines.sort()
    lines.append("+experiment (an overlay, added with +): " + ", ".join(options("experiment")))
    if _root_.hydra.get("callbacks"):  # a sweep: its jobs can run elsewhere
        lines.append("hydra/launcher: basic (default), " + ", ".join(options("hydra/launcher")))
    return "\n".join(lines)


def conf_text(relative: str) -> str:
    """A config file's text (``conf/<relative>``), from the checkout or the wheel; empty when it has none."""
    try:
        if CONF_DIR.startswith("pkg://"):
            from importlib import resources

            return resources.files("coordcheck.conf").joinpath(*relative.split("/")).read_text()
        return (Path(CONF_DIR) / relative).read_text()
    except (OSError, FileNotFoundError):
        return ""


_KEY_LINE = re.compile(r"^(\s*)([A-Za-z_][\w.]*):(.*?)(?:\s+#\s*(.*))?$")


def key_comments(text: str) -> dict[str, str]:
    """``{dotted key: its comment}`` of a YAML config file, from the comments written beside its keys (a comment's
    continuation lines, ``#`` lines indented below it, are joined to it); ``defaults`` and ``hydra`` left out."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # (indent, key) of the nodes the current line is inside
    last = None
    for line in text.splitlines():
        m = _KEY_LINE.match(line)
        if not m or line.lstrip().startswith("-"):
            tail = line.strip()
            if last is not None and tail.startswith("#") and not line.startswith("#"):
                out[last] += " " + tail.lstrip("# ").strip()
            elif not tail.startswith("#") or line.startswith("#"):
                last = None
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = ".".join([k for _, k in stack] + [m.group(2)])
        stack.append((indent, m.group(2)))
        last = None
        if key.split(".")[0] in ("defaults", "hydra") or not m.group(4):
            continue
        out[key], last = m.group(4).strip(), key
    return out


def command_line_value(v: Any) -> str:
    """A value as it is typed on the command line: ``true``, ``null``, ``[out,delta]``, ``std``."""
    if isinstance(v, Enum):
        v = v.value
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(command_line_value(x) for x in v) + "]"
    return str(v)


def help_keys(*, _root_: DictConfig) -> str:
    """``--help``'s keys (``conf/hydra/help/coordcheck.yaml``): every key a user sets, with its value and what it is —
    the command's own keys from the comments of its config file (``conf/config.yaml``), each chosen option's from its
    file's (``conf/optimizer/adam.yaml``), and the report's knobs from their help (``coordcheck.report.knobs``)."""
    from coordcheck.report.knobs import KNOB_SETS

    name = str(_root_.hydra.job.config_name)
    choices = {g: c for g, c in OmegaConf.to_container(_root_.hydra.runtime.choices).items()
               if not g.startswith("hydra/") and c is not None}

    def value(key: str) -> str:
        try:
            v = OmegaConf.select(_root_, key, throw_on_missing=False)
        except Exception:  # noqa: BLE001 - an interpolation only a job resolves
            return "?"
        v = OmegaConf.to_container(v, enum_to_str=True) if OmegaConf.is_config(v) else v
        return command_line_value(v)

    def entry(key: str, text: str) -> list[str]:
        return textwrap.wrap(f"{key}={value(key)}: {text}", width=100, initial_indent="  ",
                             subsequent_indent="      ")

    lines = ["Keys of this command (key=value on the command line):"]
    for key, text in key_comments(conf_text(f"{name}.yaml")).items():
        if key.split(".")[0] not in choices and key in _root_:
            lines += entry(key, text)
    for group, choice in sorted(choices.items()):
        said = {k: t for k, t in key_comments(conf_text(f"{group}/{choice}.yaml")).items() if not k.startswith("_")}
        if said:
            lines.append(f"{group}={choice}:")
            lines += [x for key, text in said.items() for x in entry(f"{group}.{key}", text)]
    knobs = KNOB_SETS.get("report" if name == "config" else f"{name}_report")
    if knobs is not None and "report" in _root_:
        lines.append("report (the verdict's numbers and the report's own knobs):")
        lines += [x for key, text in knobs.help.items() for x in entry(f"report.{key}", text)]
    return "\n".join(lines).replace("$", "$$")  # Hydra's help is a string.Template: a $ of the text is not its


for _name, _resolver in (("coordcheck_dirname", safe_dirname), ("coordcheck_not_in_dirname", not_in_dirname),
                         ("cc.ratio", width_ratio), ("cc.head_dim", head_dim),
                         ("coordcheck_help_groups", help_groups), ("coordcheck_help_keys", help_keys)):
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _resolver)


GROUPS = ("model", "data", "parametrization", "optimizer", "init", "depth_scaling", "logger", "parallel")


def options(group: str) -> list[str]:
    """The options of a config group (``conf/<group>/*.yaml``), from the checkout or the wheel."""
    if CONF_DIR.startswith("pkg://"):
        from importlib import resources

        folder = resources.files("coordcheck.conf").joinpath(group)
        return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


def logger_keys() -> list[str]:
    """``logger.<tracker>.<key>`` for every setting of every tracker in ``conf/logger/``: like ``logger`` itself,
    they do not change a job's frame, so they do not name its directory."""
    out = []
    for name in options("logger"):
        if CONF_DIR.startswith("pkg://"):
            from importlib import resources

            text = resources.files("coordcheck.conf").joinpath("logger", f"{name}.yaml").read_text()
        else:
            text = (Path(CONF_DIR) / "logger" / f"{name}.yaml").read_text()
        for tracker, node in OmegaConf.create(text).items():
            out += [f"logger.{tracker}.{key}" for key in node]
    return out


def compose_config(overrides: list[str], config_name: str = "config", *, hydra: bool = False) -> DictConfig:
    """``conf/<config_name>.yaml`` composed with ``overrides`` (no sweeps), as ``python -m coordcheck`` composes it.
    ``hydra``: with Hydra's own node (``hydra.mode``, ``hydra.sweeper.params``; not resolvable outside a run)."""
    import importlib

    from hydra import compose

    if config_name in SCHEMA_HOMES:  # its report schema is in the ConfigStore once its knobs' module is imported
        importlib.import_module(SCHEMA_HOMES[config_name])
    with hydra_context():
        return compose(config_name, overrides=overrides, return_hydra_config=hydra)


# a config whose defaults name a report schema (``schema/<name>``) registered by another experiment's knobs module;
# ``config`` itself: coordcheck.report.knobs, imported above
SCHEMA_HOMES = {"transfer": "coordcheck.transfer.knobs"}


@contextmanager
def hydra_context() -> Iterator[Any]:
    """Hydra initialised on ``conf/`` (the checkout's or the wheel's) for ``hydra.compose``; yields its config loader
    (the groups of the search path and their options)."""
    from hydra import initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    init = (initialize_config_module(CONF_DIR.removeprefix("pkg://"), version_base="1.3")
            if CONF_DIR.startswith("pkg://") else initialize_config_dir(CONF_DIR, version_base="1.3"))
    with init:
        yield GlobalHydra.instance().config_loader()



