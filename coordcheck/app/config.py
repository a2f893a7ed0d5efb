"""The configuration layer: from the composed Hydra config to checked values and objects.

Stage: configuration, shared by every command line (the coordinate check, the gradient-flow
probe, the μTransfer sweep). Input: ``conf/*.yaml`` and the command line. Output: a composed,
typed, range-checked config, and the objects its groups name (``instantiate_node``). Here live
the resolvers the YAML files use (``coordcheck_dirname``, ``coordcheck_not_in_dirname``; ``cc.ratio`` and
``cc.head_dim`` for width-dependent model fields), the
schemas of the ``report.*`` knobs (:class:`Knobs`: generated from a rules dataclass, registered
in Hydra's ConfigStore, and the source of the report CLIs' flags), the checks of group choices
and of the run keys (``device``, ``precision``, ``compile``), and :func:`check_command_line`,
which composes a command line once so that a bad override is one line and exit 2 (a typo names the closest
valid name: ``coordcheck.app.overrides``).
Nothing here imports torch at import time.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from coordcheck.core.errors import (
    CoordCheckError, check_count, check_depth, check_loss, check_threads, check_width, positive_number, resolve_seeds,
)
from coordcheck.core.frame import digest
from coordcheck.core.targets import locate
from coordcheck.app.overrides import check_groups, check_keys, hydra_flag, is_group, unknown_option
from coordcheck.report.knobs import (  # noqa: F401  (re-exported: their home was here)
    KNOBS, LAYOUTS, REPORT, SIZES, Knobs, Layout, ReportOptions, Size, Stat, cli_flag, knob_error, report_options,
    rules_of,
)

__all__ = ["CONF_DIR", "GROUPS", "NOT_IN_JOB", "RUN_DEFAULTS", "resolved_config", "instantiate_node", "check_run",
           "positive_number", "safe_dirname", "NOT_IN_FAMILY", "job_depth", "Knobs", "REPORT", "ReportOptions",
           "report_options", "rules_of", "not_in_dirname", "knob_error", "options",
           "check_choices", "compose_config", "check_command_line", "check_values", "check_targets", "locate",
           "JOB_CHECKS", "one_value", "check_jobs", "is_remote", "check_typos", "hydra_context"]

REPO_CONF = Path(__file__).resolve().parents[2] / "conf"
CONF_DIR = str(REPO_CONF) if REPO_CONF.is_dir() else "pkg://coordcheck.conf"
NOT_IN_JOB = ("progress", "report", "threads", "logger")  # keys that do not change a job's frame
NOT_IN_ID = ("width", "device", *NOT_IN_JOB)  # ... nor what a configuration is (a width on another device is
# the same configuration; its precision is not). A depth is part of a configuration: each depth of a depth sweep is one
# configuration of the width verdict, and the depths of one configuration share its family_id (NOT_IN_FAMILY).
NOT_IN_FAMILY = ("depth", *NOT_IN_ID)


RUN_DEFAULTS = {"device": "auto", "precision": "fp32", "compile": False,
                "init": {"_target_": "coordcheck.setup.init.as_built", "_partial_": True},
                "depth": None, "base_depth": 2, "depth_key": "auto",
                "depth_scaling": {"_target_": "coordcheck.setup.depth.DepthScaling", "name": "none", "alpha": 0.0}}  # at these values a key is left
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


def is_remote(overrides: list | None) -> bool:
    """Whether another launcher than the basic one runs the jobs (``hydra/launcher=...``): perhaps on other machines,
    which check where they run what only they can see (a device, an importable module)."""
    return any(getattr(o, "key_or_group", None) == "hydra/launcher" for o in overrides or [])


def check_run(cfg: DictConfig, overrides: list | None = None) -> None:
    """``device``, ``precision`` and ``compile``, checked when the command line is composed (one line, exit 2).

    With another launcher than the basic one (``hydra/launcher=slurm``: jobs run on other machines) the
    device is checked for its form only; the job checks that it exists where it runs."""
    from coordcheck.setup.device import check_compile, check_precision, resolve_device

    remote = is_remote(overrides)
    device = str(cfg.get("device", "auto"))
    if not (remote and re.fullmatch(r"auto|cpu|cuda(:\d+)?", device)):  # remote: its form is right, the job checks
        resolve_device(device)
    check_precision(cfg.get("precision", "fp32"))
    check_compile(cfg.get("compile", False))


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
    """The job's :class:`coordcheck.setup.depth.Depth` from ``depth``, ``base_depth``, ``depth_key`` and ``depth_scaling``
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


for _name, _resolver in (("coordcheck_dirname", safe_dirname), ("coordcheck_not_in_dirname", not_in_dirname),
                         ("cc.ratio", width_ratio), ("cc.head_dim", head_dim)):
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _resolver)


# -- the command line: checked once before Hydra runs anything -------------------------------------------------------

GROUPS = ("model", "data", "parametrization", "optimizer", "init", "depth_scaling", "logger")


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
                raise unknown_option(group, choice, known)


def compose_config(overrides: list[str], config_name: str = "config", *, hydra: bool = False) -> DictConfig:
    """``conf/<config_name>.yaml`` composed with ``overrides`` (no sweeps), as ``python -m coordcheck`` composes it.
    ``hydra``: with Hydra's own node (``hydra.mode``, ``hydra.sweeper.params``; not resolvable outside a run)."""
    from hydra import compose

    with hydra_context():
        return compose(config_name, overrides=overrides, return_hydra_config=hydra)


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


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()).split(" Config search path:")[0]  # Hydra's list of search paths: not for users
    override = getattr(e, "override", None)  # a parse error names its override only as an attribute
    return f"cannot parse {override!r}: {text}" if override and override not in text else text


def _is_report(key: str) -> bool:
    return key == "report" or key.startswith("report.")


_FLAGS = {"--multirun": 0, "--run": 0, "--resolve": 0, "--cfg": 1, "--package": 1}  # Hydra's flags (long forms:
# overrides.hydra_flag) that keep the usual config, and how many values each takes


def _swept(override: Any) -> list | None:
    """The values a sweep override takes, parsed as Hydra parses them (``0.01,-1`` -> [0.01, -1]; a quoted value as
    its text); None for sweeps Hydra enumerates only as it runs them (``interval()``, ``glob()``)."""
    try:
        return [getattr(v, "text", v) for v in override.sweep_iterator()]
    except HydraException:
        return None


def _swept_values(overrides: list) -> dict[str, list | None]:
    """The values each swept key takes, as Hydra's sweeper reads the overrides: the last one for a key wins."""
    swept: dict[str, list | None] = {}
    for o in overrides:
        swept[o.key_or_group] = _swept(o) if o.is_sweep_override() else None
    return swept


def check_values(cfg: DictConfig, overrides: list, checks: Mapping[str, Callable[[Any], Any]]) -> None:
    """``checks[key](value)`` for every value a key (``lr``, ``model.n_head``) takes in this command: each of its
    swept values (``lr=0.01,-1 --multirun``), or its composed one; a bad one raises its check's one-line error."""
    swept = _swept_values(overrides)
    for key, check in checks.items():
        for value in swept.get(key) or [OmegaConf.select(cfg, key)]:
            check(value)


def one_value(check: Callable[[Any], Any], key: str) -> Callable[[Any], Any]:
    """``check`` of a key that takes one value per job: a list (``width=[256,512]``, as Hydra's hint for a
    comma-separated value suggests) is a sweep written as a list, and the error says how to write it."""
    def checked(value: Any) -> Any:
        if OmegaConf.is_list(value) or isinstance(value, (list, tuple)):
            values = ",".join(str(v) for v in value)
            raise CoordCheckError(f"{key}=[{values}] is a list, not one {key}: a sweep over {key} is written "
                                  f"{key}={values} --multirun")
        return check(value)

    return checked


JOB_CHECKS: dict[str, Callable[[Any], Any]] = {  # the keys every training job reads, checked as its job checks them
    "width": one_value(check_width, "width"),
    "base_width": one_value(lambda v: check_width(v, key="base_width"), "base_width"),
    "depth": one_value(lambda v: check_depth(v, optional=True), "depth"),
    "base_depth": one_value(lambda v: None if v is None else check_depth(v, "base_depth"), "base_depth"),  # None:
    # a config without it (transfer's)
    "lr": one_value(lambda v: positive_number(v, "lr"), "lr"),
    "steps": one_value(lambda v: check_count(v, "steps"), "steps"),
    "seeds": lambda v: resolve_seeds(OmegaConf.to_object(v) if OmegaConf.is_config(v) else v),
    "threads": one_value(check_threads, "threads"),
    "loss": check_loss,
}


# -- the objects a config names, found before any job runs ------------------------------------------------------------


def check_targets(cfg: DictConfig, overrides: list) -> None:
    """Every ``_target_`` of the config's top-level nodes (``model``, ``data``, ``parametrization``,
    ``optimizer``), each swept value included, can be imported (:func:`locate`), and the model's builder can take a
    width (``parametrization.check_builder``, from its signature: nothing is built). A builder with a
    ``check_node(node, width)`` attribute (``coordcheck.setup.hf.build``) checks its config node at every width the command
    takes, without building anything (a misspelt config class or field is one line before any job runs)."""
    swept = _swept_values(overrides)
    found_of: dict[str, list[tuple[str, Any]]] = {}  # group -> (target, object) of each value its _target_ takes
    for group, node in cfg.items():
        if not isinstance(node, DictConfig) or "_target_" not in node:
            continue
        key = f"{group}._target_"
        for target in swept.get(key) or ([] if OmegaConf.is_missing(node, "_target_") else [node._target_]):
            found = locate(target, key)
            found_of.setdefault(group, []).append((target, found))
            if group == "model" and callable(found):
                from coordcheck.setup.parametrization import check_builder

                check_builder(found)
                check_node = getattr(found, "check_node", None)
                if callable(check_node) and target == node.get("_target_"):
                    depths = swept.get("depth") or [cfg.get("depth")]
                    takes_depth = "depth" in inspect.signature(check_node).parameters
                    for width in swept.get("width") or [cfg.get("width")]:
                        for depth in depths if takes_depth else [None]:
                            check_node(node, width, **({"depth": depth} if takes_depth else {}))
            check_choice_keys(group, node, found, swept)
    check_depth_targets(cfg, swept, found_of)


def check_depth_targets(cfg: DictConfig, swept: Mapping[str, list | None],
                        found_of: Mapping[str, list[tuple[str, Any]]]) -> None:
    """The depth keys against the objects the config names (``found_of``: group -> (target, object)), nothing
    built: with ``depth`` set or swept, the builder takes a depth (``coordcheck.setup.depth.depth_keyword``: its signature,
    its config node's keys, ``depth_key``); with ``depth_scaling`` active under ``parametrization=mup``/``sp``, the
    optimizer is one whose learning rate and ε the harness can scale (``coordcheck.setup.depth.check_scaled_optimizer``)."""
    if "depth" not in cfg and "depth_scaling" not in cfg:  # another experiment's config (gradflow)
        return
    from coordcheck.setup.depth import DepthScaling, check_scaled_optimizer, depth_keyword

    model = cfg.get("model")
    if any(d is not None for d in swept.get("depth") or [cfg.get("depth")]) and isinstance(model, DictConfig):
        given = [k for k in model if not str(k).startswith("_")]
        for _, build in found_of.get("model", []):
            for key in swept.get("depth_key") or [cfg.get("depth_key", "auto")]:
                depth_keyword(build, str(key), given=given)
    node = cfg.get("depth_scaling")
    if not isinstance(node, DictConfig) or not isinstance(cfg.get("optimizer"), DictConfig):
        return
    alphas = swept.get("depth_scaling.alpha") or [node.get("alpha", 0.0)]
    scalings = [DepthScaling(str(node.get("name", "none")), float(a)) for a in alphas]
    names = [getattr(p, "name", None) for _, p in found_of.get("parametrization", [])] or [None]
    kinds = swept.get("optimizer.kind") or [cfg.optimizer.get("kind")]
    for scaling in scalings:
        for parametrization in names:
            for target, _ in found_of.get("optimizer", []):
                for kind in kinds:
                    check_scaled_optimizer(scaling, str(parametrization), target, {"kind": kind})


def check_choice_keys(group: str, node: DictConfig, target: Any, swept: Mapping[str, list | None]) -> None:
    """Each key of ``node`` that sets a ``Literal[...]`` parameter of its ``_target_`` (``optimizer.kind`` of
    ``coordcheck.setup.optim.mup_groups``) takes one of its values, every swept value included: one line before any job
    runs, worded as the target's own check words it."""
    try:
        hints = get_type_hints(getattr(target, "func", target))
    except Exception:  # noqa: BLE001 - annotations that do not resolve: the target checks its own arguments
        return
    for name, hint in hints.items():
        if get_origin(hint) is not Literal or name not in node:
            continue
        choices = get_args(hint)
        for value in swept.get(f"{group}.{name}") or [OmegaConf.select(node, name, throw_on_missing=False)]:
            if value not in choices:
                raise CoordCheckError(f"{group}.{name} must be one of {', '.join(map(str, choices))}, got {value!r}")


def _check_missing(cfg: DictConfig, overrides: list) -> None:
    """A mandatory value (``???``, as ``model=custom`` leaves ``model._target_``) that the command line does not set
    or sweep is one line saying so."""
    swept = {key for key, values in _swept_values(overrides).items() if values is not None}
    order = list(cfg.keys())
    for key in sorted(OmegaConf.missing_keys(cfg) - swept, key=lambda k: (order.index(k.split(".")[0]), k)):
        group, _, name = key.partition(".")
        if name != "_target_":
            raise CoordCheckError(f"{key} has no value (??? in its config): set it on the command line, {key}=...")
        example = "my_pkg.models.build" if group == "model" else "pkg.module.function"
        raise CoordCheckError(f"{key} has no value: set it on the command line ({key}={example}), or choose another "
                              f"{group} (conf/{group}/)")


def _is_group(key: str) -> bool:
    """Whether ``key`` names a config group of ``conf/`` (``model``, ``+experiment``), not a value."""
    if key.startswith("hydra") or "." in key:
        return False
    try:
        return bool(options(key))
    except (OSError, ValueError):
        return False


def _sweeper_params(hydra: DictConfig | None) -> list[str]:
    """``hydra.sweeper.params`` (an experiment's grid, the μTransfer default grid) as overrides."""
    params = OmegaConf.select(hydra, "sweeper.params", default=None) if hydra is not None else None
    return [f"{k}={v}" for k, v in (params or {}).items()]


def check_jobs(cfg: DictConfig, overrides: list) -> None:
    """The coordinate check's keys (:data:`JOB_CHECKS`), every value each takes in this command."""
    check_values(cfg, overrides, JOB_CHECKS)


def check_command_line(argv: list[str], *, config_name: str = "config",
                       check: Callable[[DictConfig, list], None] | None = check_jobs,
                       knobs: Knobs | None = REPORT) -> None:
    """Compose the config of ``python -m coordcheck ARGV`` once, so that a mistake is one line before any job runs,
    not a traceback or a failed job after the good ones have trained.

    Raises :class:`CoordCheckError` for a typo: a flag, config group, group option or key (set, swept, added with
    ``+``/``++`` or deleted with ``~``) that is not there, named with the closest valid one (:func:`check_typos`,
    ``coordcheck.app.overrides``); an override Hydra cannot compose; a sweep without ``--multirun``
    (``width=256,512`` would be Hydra's "Ambiguous value"); a sweep over a report knob (a sweep has one report) or
    over ``device``; a report knob of the wrong type, out of its range or unknown (``knobs``: :data:`REPORT`, or
    :data:`TRANSFER_REPORT`); a bad run key (:func:`check_run`); a mandatory value (``???``) left unset; a bad value
    of the experiment's own keys, every swept value included (``check(cfg, overrides)``: :func:`check_jobs` for the
    coordinate check); and a ``_target_`` that cannot be imported or a builder that takes no width
    (:func:`check_targets`). The sweep's grid is the command line's and the config's ``hydra.sweeper.params`` (an
    experiment's); a swept config group (``model=gpt,mlp``) is composed once per option and each is checked.
    Hydra's flags other than ``--multirun``, ``--run``, ``--cfg``, ``--package`` and ``--resolve`` (``-cd``,
    ``--help``, ...) leave the command line to Hydra, which types the report knobs against the same schema.

    ``config_name``: another experiment's config (``transfer``). What only a job can tell (a width that the model's
    heads do not divide, data that does not fit the model) is the job's to check.
    """
    args, at, values, flag, shows = [], [], 0, None, False  # at: where each override is; values: how many of the
    for i, a in enumerate(argv):  # next arguments are the last flag's value; flag: where --multirun (-m, --multi) is;
        # shows: --cfg, which prints the config and runs nothing
        if values:
            values -= 1
        elif not a.startswith("-"):
            args.append(a)
            at.append(i)
        elif a == "--":  # argparse's end of the flags
            continue
        elif (flag_of := hydra_flag(a))[0] in _FLAGS:  # an unknown flag is one line: "did you mean --multirun?"
            name, attached = flag_of
            values = 0 if attached else _FLAGS[name]
            flag = i if name == "--multirun" else flag
            shows = shows or name == "--cfg"
        else:
            return
    multirun = flag is not None
    if multirun and at and at[0] < flag < at[-1]:
        raise CoordCheckError(f"{argv[flag]} goes before or after all the overrides, not between them (Hydra's "
                              f"argparse): {' '.join(args)} {argv[flag]}")
    parse = OverridesParser.create().parse_overrides
    try:
        overrides = parse(args)
    except HydraException as e:
        raise CoordCheckError(_one_line(e)) from None
    skip = _is_report if knobs is not None else lambda key: False  # the report knobs: checked against their schema
    check_typos(overrides, config_name, skip)
    fixed = [o.input_line for o in overrides if not o.is_sweep_override()]
    try:
        cfg = compose_config(fixed, config_name, hydra=True)
    except (HydraException, OmegaConfBaseException) as e:
        cause = e.__cause__ if isinstance(e.__cause__, OmegaConfBaseException) else e
        key = str(getattr(cause, "full_key", "") or "")
        if not _is_report(key) or knobs is None:
            check_typos(overrides, config_name, skip, hydra=True, always=True)  # a key Hydra could not set: the
            raise CoordCheckError(_one_line(e)) from None  # closest one (hydra.* too); else Hydra's line
        typed = {o.key_or_group: o.get_value_string() for o in overrides if "=" in (o.input_line or "")}
        value = typed.get(key, getattr(cause, "value", None))
        raise CoordCheckError(knobs.error(key.removeprefix("report."), value)) from None
    with open_dict(cfg):
        hydra = cfg.pop("hydra")
    multirun = multirun or str(OmegaConf.select(hydra, "mode", default=None)).endswith("MULTIRUN")
    if multirun:  # the sweeper's grid: the config's params, then the command line's (it wins, as in Hydra)
        given = {o.key_or_group for o in overrides}
        overrides = [*(o for o in parse(_sweeper_params(hydra)) if o.key_or_group not in given), *overrides]
    for o in overrides:
        if o.is_sweep_override() and o.key_or_group == "device":
            raise CoordCheckError("device: one value per sweep (its jobs share their directories across devices); "
                                  "run one sweep per device")
        if o.is_sweep_override() and _is_report(o.key_or_group):
            hint = ": write a list as [0,3,10]" if o.key_or_group == "report.steps" else ""
            raise CoordCheckError(f"{o.key_or_group}: one value per sweep, its report is made once at the end "
                                  f"(got {o.get_value_string()!r}){hint}")
        if o.is_sweep_override() and not multirun:  # Hydra's "Ambiguous value", whose hint leads to a list
            raise CoordCheckError(f"{o.input_line} is a sweep: add --multirun (or give {o.key_or_group} one value)")
    if knobs is not None:
        knobs.values(cfg.get("report"))
    check_run(cfg, overrides)
    if shows:  # it prints the config, runs nothing: a ??? may be
        return  # what the user wants to see
    for variant in [cfg, *_group_variants(overrides, config_name)]:
        _check_missing(variant, overrides)
        if check is not None:
            check(variant, overrides)
        if not is_remote(overrides):  # jobs that may run elsewhere import their targets there
            check_targets(variant, overrides)


_MAX_VARIANTS = 16  # combinations of swept config groups whose keys are checked (each is one composition)


def check_typos(overrides: list, config_name: str = "config", skip: Callable[[str], bool] = _is_report, *,
                hydra: bool = False, always: bool = False) -> None:
    """A typo in ``overrides`` (parsed) is one line with the closest valid name (``coordcheck.app.overrides``): a config
    group or option (``model=mpl``, ``hydra/launcher=joblb``), or a key, set, swept, added or deleted, against the
    config composed with the command line's group choices alone — once per combination of the swept groups' options
    (``model=gpt,mlp model.depth=3`` names the option without ``depth``). ``skip(key)``: keys checked elsewhere
    (``report.*``, against its schema). ``hydra``: Hydra's own keys too (``hydra.sweep.dir``; composing its node
    doubles the time).

    Keys are checked only where composing the whole command line would not say it (a sweep, a ``+``/``++`` key, a
    swept group) unless ``always``: a set key Hydra cannot find fails that composition, which calls this again."""
    from itertools import islice, product

    from hydra import compose

    from coordcheck.app.overrides import group_choices

    with hydra_context() as loader:
        check_groups(loader, overrides)
        groups = [o for o in overrides if is_group(loader, o.key_or_group) and not o.is_delete()]
        chosen = [o.input_line for o in groups if not o.is_sweep_override()]
        swept = [[f"{o.input_line.split('=', 1)[0]}={c}" for c in group_choices(loader, o)]
                 for o in groups if o.is_sweep_override()]
        values = [o for o in overrides if o not in groups and not o.is_delete()]
        if not (always or (swept and values) or any(o.is_sweep_override() or o.is_add() or o.is_force_add()
                                                      for o in values)):
            return
        combos = list(islice(product(*swept), _MAX_VARIANTS + 1))  # [()] when no group is swept
        for combo in combos if len(combos) <= _MAX_VARIANTS else []:  # too many: each job's composition checks its own
            try:
                cfg = compose(config_name, overrides=[*chosen, *combo], return_hydra_config=hydra)
            except (HydraException, OmegaConfBaseException):
                continue  # composing the whole command line says why
            check_keys(cfg, overrides, loader=loader, context=f" with {' '.join(combo)}" if combo else "", skip=skip)


def _group_variants(overrides: list, config_name: str) -> list[DictConfig]:
    """The config composed once per option of each swept config group (``model=gpt,mlp``), the rest as given."""
    fixed = [o.input_line for o in overrides if not o.is_sweep_override()]
    variants = []
    for o in overrides:
        if not (o.is_sweep_override() and _is_group(o.key_or_group)):
            continue
        for choice in _swept(o) or []:
            line = f"{o.input_line.split('=', 1)[0]}={choice}"
            try:
                variants.append(compose_config([*fixed, line], config_name))
            except (HydraException, OmegaConfBaseException) as e:
                raise CoordCheckError(f"{line}: {_one_line(e)}") from None
    return variants
