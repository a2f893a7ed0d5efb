"""The command line, checked once before Hydra runs anything: a mistake is one line and exit 2, not a traceback or a
failed job after the good ones have trained.

Stage: app (shared by every Hydra command: ``coordcheck``, ``coordcheck.transfer``, ``coordcheck.gradflow``). Input:
the command line's overrides, parsed as Hydra parses them, and the config they compose (:mod:`coordcheck.app.config`).
Output: nothing, or a :class:`~coordcheck.core.errors.CoordCheckError` of one line — a typo named with the closest
valid name (:mod:`coordcheck.app.overrides`), a sweep without ``--multirun``, a report knob out of its range, a bad
run key (``device``, ``precision``, ``compile``), a mandatory value left unset, a bad value of a job's keys (every
swept value included), a ``_target_`` that cannot be imported or a builder that takes no width. Nothing here imports
torch at import time.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args, get_origin, get_type_hints

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from coordcheck.app.config import GROUPS, compose_config, hydra_context, options
from coordcheck.app.overrides import check_groups, check_keys, hydra_flag, is_group, unknown_option
from coordcheck.core.errors import (
    CoordCheckError, check_count, check_depth, check_loss, check_threads, check_width, positive_number, resolve_seeds,
)
from coordcheck.core.targets import locate
from coordcheck.report.knobs import REPORT, Knobs

__all__ = ["check_command_line", "check_typos", "check_values", "check_targets", "check_choices", "check_run",
           "check_jobs", "is_remote", "one_value", "JOB_CHECKS"]


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


def _check_experts(value: Any) -> int | None:
    from coordcheck.setup.experts import check_experts

    return check_experts(value, optional=True)


JOB_CHECKS: dict[str, Callable[[Any], Any]] = {  # the keys every training job reads, checked as its job checks them
    "width": one_value(check_width, "width"),
    "base_width": one_value(lambda v: check_width(v, key="base_width"), "base_width"),
    "depth": one_value(lambda v: check_depth(v, optional=True), "depth"),
    "experts": one_value(lambda v: _check_experts(v), "experts"),
    "granularity": lambda v: _check_bool(v, "granularity"),
    "pool_experts": lambda v: _check_bool(v, "pool_experts"),
    "base_depth": one_value(lambda v: None if v is None else check_depth(v, "base_depth"), "base_depth"),  # None:
    # a config without it (transfer's)
    "lr": one_value(lambda v: positive_number(v, "lr"), "lr"),
    "steps": one_value(lambda v: check_count(v, "steps"), "steps"),
    "seeds": lambda v: resolve_seeds(OmegaConf.to_object(v) if OmegaConf.is_config(v) else v),
    "threads": one_value(check_threads, "threads"),
    "loss": check_loss,
}


def _check_bool(value: Any, key: str) -> bool | None:
    if value is not None and not isinstance(value, bool):  # None: a config without the key (transfer's)
        raise CoordCheckError(f"{key} must be true or false, got {value!r}")
    return value


def check_targets(cfg: DictConfig, overrides: list) -> None:
    """Every ``_target_`` of the config's top-level nodes (``model``, ``data``, ``parametrization``,
    ``optimizer``), each swept value included, can be imported (:func:`locate`), and the model's builder can take a
    width (``parametrization.check_builder``, from its signature: nothing is built). A builder with a
    ``check_node(node, width)`` attribute (``coordcheck.setup.hf.build``) checks its config node at every width the
    command
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
                from coordcheck.setup.parametrization import check_builder, check_builder_keywords

                check_builder(found)
                if target == node.get("_target_") and getattr(found, "check_node", None) is None:
                    keywords = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items()
                                if not str(k).startswith("_")}
                    first = (swept.get("width") or [cfg.get("width")])[0]
                    check_builder_keywords(found, keywords, int(first), cfg.get("base_width"))
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
    built: with ``depth`` set or swept, the builder takes a depth (``coordcheck.setup.depth.depth_keyword``: its
    signature,
    its config node's keys, ``depth_key``); with ``depth_scaling`` active under ``parametrization=mup``/``sp``, the
    optimizer is one whose learning rate and ε the harness can scale
    (``coordcheck.setup.depth.check_scaled_optimizer``)."""
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
    (:func:`check_targets`), or a model keyword the builder does not take. The sweep's grid is the command line's and
    the config's ``hydra.sweeper.params`` (an experiment's); a swept config group (``model=gpt,mlp``) is composed
    once per option and each is checked.
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
