"""Typos on the command line: an unknown key, group option, group or flag is one line naming the closest valid one.

Stage: app, called by ``checks.check_command_line`` and so shared by every Hydra command (``coordcheck``,
``coordcheck.transfer``, ``coordcheck.gradflow`` / ``coordcheck-gradflow``) before ``hydra.main`` runs: no job runs
and no directory is made. Input: Hydra's own argument parser (its flags), Hydra's config loader (the groups of the
search path and their options, Hydra's and its plugins' included: ``hydra/launcher=joblib``), Hydra's parsed
overrides, and the config they apply to, composed from the command line's config-group choices alone. Output:
nothing, or a :class:`~coordcheck.core.errors.CoordCheckError` of one line, e.g.

    widht=64,128: no key 'widht' in the config (did you mean width?)
    unknown model 'mpl' (did you mean mlp?): choose one of custom, gpt, mlp (conf/model/)
    +model.n_laye=3 adds 'model.n_laye', a key the config does not have (did you mean model.n_layer?)
    unknown flag --mutlirun (did you mean --multirun?)

A key swept with ``--multirun`` is checked as one that is set (Hydra only sees a swept key when each job is composed,
after the sweep directory is made). ``+key=`` / ``++key=`` add a key Hydra's config does not have, which is what they
are for (``+model.n_layer=4`` for a custom builder): only a new key one letter away from a key of the same node (two
for long names) is a typo, unless the node's ``_target_`` names it as a parameter. Keys of lists and of values that
are not config nodes are left to Hydra.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from coordcheck.core.errors import CoordCheckError
from coordcheck.core.typos import closest, did_you_mean, is_near  # noqa: F401  (re-exported)

__all__ = ["closest", "did_you_mean", "is_near", "hydra_flag", "unknown_option", "check_groups", "check_keys",
           "is_group", "group_options", "group_choices"]


# -- Hydra's flags ----------------------------------------------------------------------------------------------------

def _flags() -> dict[str, tuple[str, bool]]:
    """Every option string of Hydra's own parser -> its long form (``-m`` -> ``--multirun``) and whether it takes a
    value."""
    from hydra._internal.utils import get_args_parser

    out = {}
    for action in get_args_parser()._actions:  # argparse keeps its options there (no public accessor)
        long = max(action.option_strings, key=len, default="")
        out.update({s: (long, action.nargs != 0) for s in action.option_strings})
    return out


def multirun_last(argv: list[str]) -> list[str]:
    """``argv`` with ``--multirun`` (``-m``, ``--multi``) after the overrides wherever it was typed: Hydra's argparse
    refuses it between two overrides (``width=256,512 --multirun parametrization=sp``), and its place means nothing.
    Other flags and their values keep their order; an argument that is no Hydra flag is left as it is (the checks say
    so in one line)."""
    moved, rest = [], []
    for a in argv:
        try:
            is_multirun = a.startswith("-") and a != "--" and hydra_flag(a) == ("--multirun", False)
        except CoordCheckError:
            is_multirun = False
        (moved if is_multirun else rest).append(a)
    if not moved:
        return list(argv)
    end = rest.index("--") if "--" in rest else len(rest)
    return [*rest[:end], *moved, *rest[end:]]


def hydra_flag(arg: str) -> tuple[str, bool]:
    """The long form of the Hydra flag ``arg`` names, and whether its value is in ``arg`` (``--cfg=job``, ``-cjob``),
    as argparse reads it: ``-m``, a unique prefix of a long flag (``--multi``), a short flag with its value attached.
    A flag Hydra does not have is one line naming the closest one."""
    flags, name = _flags(), arg.split("=", 1)[0]
    if name in flags:
        return flags[name][0], "=" in arg
    prefixed = {flags[f][0] for f in flags if name.startswith("--") and f.startswith(name)}
    if len(prefixed) == 1:
        return prefixed.pop(), "=" in arg
    if not name.startswith("--") and flags.get(arg[:2], ("", False))[1]:  # -cjob: -c job
        return flags[arg[:2]][0], True
    hint = did_you_mean(name, [f for f in flags if f.startswith("--")] if name.startswith("--") else flags)
    raise CoordCheckError(f"unknown flag {name}{hint}" + ("" if hint else f": Hydra's flags are {', '.join(flags)}"))


# -- config groups ----------------------------------------------------------------------------------------------------

def is_group(loader: Any, key: str) -> bool:
    """Whether ``key`` (``model``, ``hydra/launcher``) is a config group of the search path (Hydra's config loader)."""
    parent, _, name = key.rpartition("/")
    try:
        return name in loader.list_groups(parent)
    except Exception:  # a parent that is not a group
        return False


def group_options(loader: Any, group: str) -> list[str]:
    """The options of a config group, as Hydra finds them (the checkout's ``conf/``, the wheel's, Hydra's plugins')."""
    return sorted(loader.get_group_options(group))


def _all_groups(loader: Any, parent: str = "") -> list[str]:
    out = []
    for name in loader.list_groups(parent):
        group = f"{parent}/{name}" if parent else name
        out += [group, *_all_groups(loader, group)]
    return out


def unknown_option(group: str, choice: str, known: list[str]) -> CoordCheckError:
    """``unknown model 'mpl' (did you mean mlp?): choose one of custom, gpt, mlp (conf/model/)``."""
    where = "" if group.startswith("hydra/") else f" (conf/{group}/)"  # Hydra's groups come from its plugins too
    return CoordCheckError(f"unknown {group} {choice!r}{did_you_mean(choice, known)}: choose one of "
                           f"{', '.join(known)}{where}")


def group_choices(loader: Any, override: Any) -> list[str]:
    """What each job of a config-group override chooses (each swept value; a ``glob()``'s matches), as the text of
    an override's value: ``mlp``, or ``[tensorboard,mlflow]`` for a group that takes several options at once."""
    return [v if isinstance(v, str) else f"[{','.join(v)}]"
            for v in _choices(override, group_options(loader, override.key_or_group))]


def _text(value: Any) -> Any:
    value = getattr(value, "text", value)  # a quoted string
    return [str(getattr(v, "text", v)) for v in value] if isinstance(value, list) else str(value)


def _choices(override: Any, known: list[str]) -> list[str | list[str]]:
    """Each job's choice: an option, or a list of options (``logger=[tensorboard,mlflow]``)."""
    from hydra.core.override_parser.types import Glob

    value = override.value()
    if isinstance(value, Glob):
        return value.filter(known)
    if override.is_sweep_override():
        try:
            return [_text(v) for v in override.sweep_iterator()]
        except Exception:  # interval(): not a choice of options; Hydra says so
            return []
    return [_text(value)] if isinstance(value, (str, list)) else []


def check_groups(loader: Any, overrides: list) -> None:
    """Every config-group override names a group of the search path and options it has (each swept one too)."""
    from hydra.core.override_parser.types import Glob

    for o in overrides:
        key = o.key_or_group
        if o.is_delete():
            continue
        if is_group(loader, key):
            known = group_options(loader, key)
            if o.value() is None or not known:
                continue
            chosen = _choices(o, known)
            if isinstance(o.value(), Glob) and not chosen:
                raise CoordCheckError(f"{o.input_line} matches no {key} option: choose among {', '.join(known)}")
            for choice in (c for job in chosen for c in ([job] if isinstance(job, str) else job)):
                if choice not in known:
                    raise unknown_option(key, choice, known)
        elif "/" in key:  # a group path that is not one
            raise CoordCheckError(f"{o.input_line}: no config group {key!r}{did_you_mean(key, _all_groups(loader))}")


# -- keys -------------------------------------------------------------------------------------------------------------

def _missing(cfg: DictConfig, key: str) -> tuple[str, DictConfig] | None:
    """The first part of the dotted ``key`` that ``cfg`` lacks (as a dotted path) and the node that lacks it; None
    when the key is there, or when a part of it is a list or a value (Hydra's to judge)."""
    node, parts = cfg, key.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, DictConfig) or node._is_none() or node._is_missing() or node._is_interpolation():
            return None
        if part not in node.keys():
            return ".".join(parts[:i + 1]), node
        node = node._get_node(part)
    return None


def _targets(overrides: list) -> dict[str, list[str]]:
    """``{node: [targets]}`` for the ``node._target_=...`` overrides (each swept one; the last override wins)."""
    out: dict[str, list[str]] = {}
    for o in overrides:
        node, _, last = o.key_or_group.rpartition(".")
        if last == "_target_" and not o.is_delete():
            try:
                values = [_text(v) for v in o.sweep_iterator()] if o.is_sweep_override() else [_text(o.value())]
            except Exception:  # a sweep Hydra enumerates only as it runs it
                values = []
            out[node] = [v for v in values if isinstance(v, str)]
    return out


def _takes(node: DictConfig, path: str, name: str, targets: dict[str, list[str]]) -> bool:
    """Whether a ``_target_`` of the node at ``path`` (the command line's, else the config's) names ``name`` as a
    parameter (a builder's ``n_blocks``)."""
    if path not in targets:
        target = node._get_node("_target_") if "_target_" in node.keys() else None
        if target is None or target._is_missing() or not isinstance(target._value(), str):
            return False
        targets = {path: [target._value()]}
    from hydra.utils import get_object

    for target in targets[path]:
        try:
            found = get_object(target)
            if name in inspect.signature(getattr(found, "func", found)).parameters:
                return True
        except Exception:  # cannot be imported here (checks.check_targets says why) or has no signature
            continue
    return False


def _where(path: str) -> str:
    return path.rpartition(".")[0]


def check_keys(cfg: DictConfig, overrides: list, *, loader: Any, context: str = "",
               skip: Callable[[str], bool] = lambda key: False) -> None:
    """Every value override (set, swept, added with ``+``/``++``, deleted with ``~``) against ``cfg``, the config
    composed with the command line's group choices alone: a key that is not there is one line with the closest key
    of its node. ``context`` (`` with model=gpt``) says which choice of a swept group lacks it; ``skip(key)``: keys
    checked elsewhere (``report.*``, against its schema). ``hydra.*`` keys are checked when ``cfg`` has Hydra's node.
    """
    added: set[str] = set()
    for o in overrides:
        key = o.key_or_group
        if is_group(loader, key) or skip(key) or (key.split(".")[0] == "hydra" and "hydra" not in cfg):
            continue
        if any(key == a or key.startswith(a + ".") for a in added):  # set after a +key= earlier on the line
            continue
        miss = _missing(cfg, key)
        if o.is_add() or o.is_force_add():
            added.add(key)
            if miss is None:
                if o.is_add() and _exists(cfg, key):
                    value = o.input_line.split("=", 1)[1] if "=" in o.input_line else "..."
                    raise CoordCheckError(f"{o.input_line}: {key} is already in the config{context}: write "
                                          f"{key}={value} (++{key}= sets it whether or not it is there)")
                continue
            path, node = miss
            name, siblings = path.rpartition(".")[2], [k for k in node.keys() if isinstance(k, str)]
            near = [s for s in siblings if is_near(name, s)]
            if near and not _takes(node, _where(path), name, _targets(overrides)):
                best = closest(name, near, cutoff=0) or near[0]
                where = _where(path)
                raise CoordCheckError(f"{o.input_line} adds {path!r}, a key the config does not have{context} (did "
                                      f"you mean {where + '.' if where else ''}{best}?)")
            continue
        if miss is None:
            continue
        path, node = miss
        name, where = path.rpartition(".")[2], _where(path)
        siblings = [k for k in node.keys() if isinstance(k, str)]
        hint = did_you_mean(name, siblings, prefix=where + "." if where else "")
        line = o.input_line if o.input_line else key
        if o.is_delete():
            raise CoordCheckError(f"{line}: no key {path!r} in the config{context} to delete{hint}")
        if not hint:  # no key is close: the keys there (Hydra's own left out at the top)
            siblings = [k for k in siblings if where or k != "hydra"]
            hint = (f": {where or 'the config'} has {', '.join(siblings)}" if siblings else "") + f" (+{line} adds it)"
        raise CoordCheckError(f"{line}: no key {path!r} in the config{context}{hint}")


def _exists(cfg: DictConfig, key: str) -> bool:
    """Whether the dotted ``key`` is a path of ``cfg`` through its nodes to the end."""
    node = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node.keys():
            return False
        node = node._get_node(part)
    return True
