"""The report's knobs: one schema for ``report.*`` in a sweep's config and for the flags of its report command.

Stage: report (what is shown; read by the app when it checks a command line, and by each experiment's report
command). Input: a rules dataclass of :func:`coordcheck.core.errors.knob` fields (the verdict's
:class:`~coordcheck.judge.rules.Rules`, the learning-rate sweep's ``TransferRules``) and the report's own knobs. Output:
a :class:`Knobs` — the structured-config dataclass registered in Hydra's ConfigStore (so the config is typed when it
is composed), the checked values, and one command-line flag per knob. A rule added to the dataclass is a knob here;
ranges and help lines are on the rules' fields. Nothing here imports torch or matplotlib.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, make_dataclass
from enum import Enum
from typing import Any, List, Optional, get_type_hints

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from coordcheck.core.errors import CoordCheckError, expected, in_range
from coordcheck.core.typos import did_you_mean
from coordcheck.judge.rules import Rules

__all__ = ["Knobs", "KNOB_SETS", "REPORT", "ReportOptions", "KNOBS", "SIZES", "LAYOUTS", "DEFAULT_LAYOUT", "Stat",
           "Size", "Layout", "cli_flag", "knob_error", "report_options", "rules_of"]


# plot.Size and plot.Layout (plot imports matplotlib: too slow for the config path)
SIZES = ("paper", "column", "slides")


LAYOUTS = ("guide", "grid")  # the coord-check figure's layouts (plot.Layout); the first is the default
DEFAULT_LAYOUT = LAYOUTS[0]


def _choice(name: str, values: tuple[str, ...]) -> type[Enum]:
    return Enum(name, {v: v for v in values}, module=__name__)


Stat = _choice("Stat", next(f for f in fields(Rules) if f.name == "stat").metadata["choices"])
Size, Layout = _choice("Size", SIZES), _choice("Layout", LAYOUTS)


KNOB_SETS: dict[str, "Knobs"] = {}  # each experiment's report knobs by name (report, transfer_report)


def cli_flag(key: str) -> str:
    """A knob as a report CLI spells it: ``--shrink-tol`` for ``shrink_tol``."""
    return "--" + key.replace("_", "-")


@dataclass(eq=False)
class Knobs:
    """The ``report`` node of one experiment: the fields of ``rules`` (a frozen dataclass of
    :func:`coordcheck.core.errors.knob` fields: default, range, choices and help are defined there, once), then ``own``
    knobs, the report's, as ``(name, type, default, help)``.

    ``schema`` is the generated structured-config dataclass ``schema_name`` (in Hydra's ConfigStore as
    ``schema/<name>``, and an attribute of the module ``module`` — the one that defines these knobs — so that configs
    pickle by reference); ``choices`` maps knobs with a closed set of values to their Enum (the own knobs' and the
    rules' alike).
    """

    name: str
    schema_name: str
    rules: type
    own: tuple[tuple[str, Any, Any, str], ...]
    choices: dict[str, type[Enum]] = field(default_factory=dict)
    module: str = __name__

    def __post_init__(self) -> None:
        hints, defaults = get_type_hints(self.rules), self.rules()

        def knob(f: Any) -> tuple[str, Any, Any]:
            kind = self.choices.get(f.name) or (hints[f.name] if hints[f.name] in (bool, int, float, str) else Any)
            default = getattr(defaults, f.name)
            return f.name, kind, field(default=kind(default) if f.name in self.choices else default)

        self.schema = make_dataclass(
            self.schema_name,
            [*(knob(f) for f in fields(self.rules)), *((n, k, field(default=d)) for n, k, d, _ in self.own)],
            namespace={"__doc__": f"The ``report`` config node: the fields of ``{self.rules.__name__}``, then the "
                                  "report's own knobs."})
        self.schema.__module__ = self.module  # pickled by reference with the config (joblib, submitit)
        self.kinds: dict[str, Any] = {f.name: f.type for f in fields(self.schema)}
        self.bounds = {f.name: f.metadata.get("bounds", ()) for f in fields(self.rules)}
        self.help = {**{f.name: f.metadata.get("help", "") for f in fields(self.rules)},
                     **{n: h for n, _, _, h in self.own}}  # one line per knob, for --help (no % signs: argparse)
        ConfigStore.instance().store(group="schema", name=self.name, node=self.schema)
        KNOB_SETS[self.name] = self  # --help describes each knob (coordcheck.app.config.help_keys)

    def expected(self, key: str) -> str:
        """What a knob takes, in words: ``a number > 0``, ``one of paper, slides``, ``true or false``."""
        kind = self.kinds[key]
        if isinstance(kind, type) and issubclass(kind, Enum):
            return expected(str, choices=tuple(m.value for m in kind))
        if key == "steps":
            return "null or a list of steps >= 0, e.g. [0,3,10]"
        return expected(kind, self.bounds.get(key, ()))

    def error(self, key: str, value: Any = None, flag: Callable[[str], str] = "report.{}".format) -> str:
        """One line for a bad knob, named as the user wrote it (``report.tol`` in a sweep, ``--tol`` in a report
        CLI)."""
        if key not in self.kinds:
            hint = did_you_mean(key, self.kinds, prefix=flag("")) if key else ""
            return f"{flag(key)}: unknown knob{hint}: choose one of {', '.join(self.kinds)}"
        return f"{flag(key)}: must be {self.expected(key)} (got {value!r})"

    def values(self, node: Mapping | None = None, flag: Callable[[str], str] = "report.{}".format) -> dict[str, Any]:
        """The knobs, typed by the schema and range-checked, as plain values (choices as strings).

        ``node``: the ``report`` config node, or a mapping of the knobs to set (the rest keep their defaults).
        A bad knob raises :class:`CoordCheckError` naming it with ``flag``.
        """
        if not (node is None or isinstance(node, (Mapping, DictConfig))):
            raise CoordCheckError(f"report: must hold the knobs {', '.join(self.kinds)} (got {node!r})")
        try:
            given = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node or {})
            values = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(self.schema), given),
                                            enum_to_str=True)
        except OmegaConfBaseException as e:
            raise CoordCheckError(self.error(str(e.full_key or e.key).removeprefix("report."), e.value, flag)) from None
        for key, checks in self.bounds.items():
            if key in values and not in_range(values[key], checks):
                raise CoordCheckError(self.error(key, values[key], flag))
        if any(step < 0 for step in values.get("steps") or ()):
            raise CoordCheckError(self.error("steps", values["steps"], flag))
        return values

    def rules_of(self, values: Mapping[str, Any]) -> Any:
        """The rules dataclass from knob values (the fields they share)."""
        return self.rules(**{f.name: values[f.name] for f in fields(self.rules) if f.name in values})

    def add_flags(self, parser: argparse.ArgumentParser, only: tuple[str, ...] | None = None) -> None:
        """One flag per knob (``--shrink-tol`` for ``shrink_tol``; ``--no-figures``/``--figures`` for a bool), its
        type, default and choices from the schema and its help from :attr:`help`. ``only``: these knobs alone."""
        defaults = self.schema()
        for f in fields(self.schema):
            if only is not None and f.name not in only:
                continue
            default, kind = getattr(defaults, f.name), self.kinds[f.name]
            if isinstance(default, Enum):
                flag = dict(choices=[m.value for m in type(default)], type=str)
                default = default.value
            elif kind is bool:
                flag = dict(action=argparse.BooleanOptionalAction)
            elif f.name == "steps":
                flag = dict(type=_steps)
            else:
                flag = dict(type=kind if kind in (int, float) else str)
            parser.add_argument(cli_flag(f.name), default=default, **flag,
                                help=f"{self.help[f.name]} (default {default})")


def _steps(text: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps takes comma-separated integers, got {text!r}") from None


REPORT = Knobs(
    name="report", schema_name="ReportOptions", rules=Rules,
    own=(("figures", bool, True, "draw the figures (coord_check, slopes, loss)"),
         ("size", Size, Size.paper, "figure size: paper (a page's width), column (one of two) or 16:9 slides"),
         ("steps", Optional[List[int]], None,
          "steps shown in the coord-check figure, e.g. 0,3,10 (null: up to 4 spread over the run)"),
         ("strict", bool, False, "exit 1 on fail, 2 when inconclusive, 0 on pass (a CI gate)"),
         ("layout", Layout, Layout(DEFAULT_LAYOUT),
          "coord-check figure: guide (a panel per kind of activation, a line per step: the paper figure) or grid "
          "(a panel per step, a line per module)")),
    choices={"stat": Stat, "size": Size, "layout": Layout},
)


ReportOptions = REPORT.schema


KNOBS: dict[str, Any] = REPORT.kinds


def knob_error(key: str, value: Any = None, flag: Callable[[str], str] = "report.{}".format) -> str:
    """:meth:`Knobs.error` of the coordinate check's report."""
    return REPORT.error(key, value, flag)


def report_options(node: Mapping | None = None, flag: Callable[[str], str] = "report.{}".format) -> dict[str, Any]:
    """The coordinate check's report knobs, checked (:meth:`Knobs.values`)."""
    return REPORT.values(node, flag)


def rules_of(options: Mapping[str, Any]) -> Rules:
    """The verdict's :class:`Rules` from report knobs (the fields they share)."""
    return REPORT.rules_of(options)
