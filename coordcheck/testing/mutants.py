"""Mutation testing of the diagnosis: one muP knob planted wrong (or two) in a model whose answer is known, and the
verdict's causes scored against what was planted.

A **family** is a model run as its authors run it (:class:`Family`: a builder, the ``coord_check`` options that make
its unmutated base PASS, and named sets of its parameters). A **plant** changes one knob muP has, on named parameters
or in the forward (:class:`Plant`):

* ``lr`` / ``wd`` / ``eps`` — the optimizer's learning rate, weight decay or Adam ε of those parameters times
  ``(width / base_width) ** exponent`` (they are moved to a parameter group of their own, every other key of their
  group kept: any ``torch.optim`` optimizer, mup's Mu* ones, Muon);
* ``init`` — those parameters multiplied by ``(width / base_width) ** exponent`` after the model's own
  initialisation (and the parametrization's, and ``init=mup``'s): an init std with another exponent in width;
* a forward knob (``output_multiplier``, ``attention_scale``, ``depth_multiplier``) — builder keywords
  (``kwargs``), the family's own switch for it.

The truth of a mutant is its construction: the modules it planted (``Plant.modules``) and the knob. A cause *claims*
a knob of modules (:func:`claims`: its kind, or the audit quantity it measured); the score (:func:`score`) says
whether the first cause names a planted module and knob and nothing else (``exact``), which plants some cause names,
and every **wrong fix**: a cause whose fix would change a knob that was right (a module or knob nothing planted). A
cause that names no single fix but the candidates the evidence leaves (kind ``candidates``) is never a wrong fix.

``experiments/atlas.py`` runs the atlas (:mod:`coordcheck.testing.atlas`) and prints the confusion table; a fast
subset runs in the suite (``tests/test_atlas.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from torch import nn

from coordcheck.setup.init import resolve_init
from coordcheck.setup.optim import OPTIMIZERS, with_mu
from coordcheck.setup.parametrization import PARAMETRIZATIONS, named_keywords

__all__ = ["KNOBS", "Plant", "Family", "Mutant", "Score", "mutant_options", "run_mutant", "claims", "score"]

# The knobs muP has, as a plant names them; a cause's kind (or audit quantity) maps onto one of them (KIND_KNOB).
KNOBS = {
    "init": "a parameter's initialisation std (its exponent in width)",
    "lr": "a parameter's learning rate (its exponent in width)",
    "wd": "a parameter's weight decay (its exponent in width)",
    "eps": "Adam's ε (its exponent in width, or its size against √v̂)",
    "output_multiplier": "the 1/width multiplier on the model's output (logits)",
    "attention_scale": "attention's 1/d_head scale (against 1/sqrt(d_head))",
    "depth_multiplier": "the residual branches' depth multiplier",
}
OPTIMIZER_KNOBS = {"lr": "lr", "wd": "weight_decay", "eps": "eps"}  # plant knob -> param-group key
KIND_KNOB = {"init": "init", "lr": "lr", "readout_lr": "lr", "output_multiplier": "output_multiplier",
             "attention_scale": "attention_scale", "structure": "output_multiplier", "epsilon": "eps",
             "multiplier": "depth_multiplier", "lr_vanish": "lr", "wd": "wd"}
AUDIT_KNOB = {"init": "init", "lr": "lr", "wd": "wd", "adam_eps": "eps", "mult": "output_multiplier"}


@dataclass(frozen=True)
class Plant:
    """One knob planted wrong. ``modules``: what a cause must name (module names; a name also covers what runs inside
    it: ``blocks.0.attn`` covers ``blocks.0.attn.(sdpa)``); ``params``: the parameters an optimizer or init plant
    changes, by ``factor * (width / base_width) ** exponent``; ``kwargs``: builder keywords of a forward plant."""

    knob: str
    modules: tuple[str, ...]
    params: tuple[str, ...] = ()
    exponent: float = 0.0
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    factor: float = 1.0  # times a constant too (an ε too large at every width)

    def __post_init__(self) -> None:
        assert self.knob in KNOBS, self.knob
        assert self.params or self.kwargs, "a plant changes parameters or builder keywords"


@dataclass(frozen=True)
class Family:
    """A model as its authors run it: ``build`` and the ``coord_check`` options (``run``) under which its base PASSes
    at ``widths`` (or ``depths``, at one width); ``params``: named sets of its parameters for the plants."""

    name: str
    build: Callable[..., nn.Module]
    run: Mapping[str, Any]
    widths: tuple[int, ...]
    params: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    depths: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Mutant:
    family: Family
    name: str
    plants: tuple[Plant, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.family.name}/{self.name}"


def _modules(params: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.rpartition(".")[0] or "(root)" for p in params))


def _scale(width: int, base_width: int, exponent: float) -> float:
    return (width / base_width) ** exponent


def _edited_factory(base: Callable[..., torch.optim.Optimizer], plants: Sequence[Plant]) -> Callable[..., Any]:
    """The family's optimizer factory, then each optimizer plant's parameters moved to a group of their own with the
    planted key scaled (every other key of the group they left kept)."""
    def factory(model: nn.Module, lr: float, *, build: Any = None, width: int = 0, base_width: int = 0,
                ) -> torch.optim.Optimizer:
        opt = base(model, lr, **named_keywords(base, build=build, width=width, base_width=base_width))
        named = dict(model.named_parameters())
        inner = [o for o in vars(opt).values() if isinstance(o, torch.optim.Optimizer)]  # MuonWithAdamW's two parts
        for plant in plants:
            key = OPTIMIZER_KNOBS[plant.knob]
            factor = plant.factor * _scale(width, base_width, plant.exponent)
            for name in plant.params:
                p = named[name]
                group = next(g for g in opt.param_groups if any(q is p for q in g["params"]))
                group["params"] = [q for q in group["params"] if q is not p]
                if key not in group:
                    raise ValueError(f"{plant.knob} plant on {name}: its optimizer group has no {key!r}")
                new = {**group, "params": [p], key: group[key] * factor}
                owner = next((o for o in inner if any(g is group for g in o.param_groups)), None)
                if owner is not None:  # the part that steps it must hold its new group (the wrapper steps the parts)
                    owner.param_groups.append(new)
                opt.param_groups.append(new)
        for o in (opt, *inner):
            o.param_groups[:] = [g for g in o.param_groups if g["params"]]
        return opt
    return factory


def _edited_init(base: Callable[..., None] | None, plants: Sequence[Plant]) -> Callable[..., None]:
    """The family's init (none, ``mup`` or its own), then each init plant's parameters scaled in place."""
    @torch.no_grad()
    def init(model: nn.Module, *, build: Any = None, width: int = 0, base_width: int = 0, seed: int = 0,
             parametrization: Any = None) -> None:
        if base is not None:
            base(model, **named_keywords(base, build=build, width=width, base_width=base_width, seed=seed,
                                         parametrization=parametrization))
        named = dict(model.named_parameters())
        for plant in plants:
            for name in plant.params:
                named[name].mul_(plant.factor * _scale(width, base_width, plant.exponent))
    return init


def mutant_options(mutant: Mutant) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(coord_check options, builder keywords)`` of ``mutant``: the family's run with the plants applied."""
    run = dict(mutant.family.run)
    kwargs: dict[str, Any] = dict(run.pop("build_kwargs", {}))
    opt_plants = [p for p in mutant.plants if p.knob in OPTIMIZER_KNOBS and p.params]
    init_plants = [p for p in mutant.plants if p.knob == "init" and p.params]
    for p in mutant.plants:
        kwargs.update(p.kwargs)
    if opt_plants:
        base = run.get("optimizer", "adam")
        if isinstance(base, str):
            par = PARAMETRIZATIONS[str(run.get("parametrization", "mup"))]()
            base = with_mu(OPTIMIZERS[base], par.mu_optimizer)
        run["optimizer"] = _edited_factory(base, opt_plants)
    if init_plants:
        run["init"] = _edited_init(resolve_init(run.get("init")), init_plants)
    return run, kwargs


def run_mutant(mutant: Mutant, **overrides: Any) -> Any:
    """Train ``mutant`` as its family runs (``overrides``: other ``coord_check`` options) and return the
    ``CoordCheckResult``."""
    from coordcheck.app.api import coord_check

    run, kwargs = mutant_options(mutant)
    run.update(overrides)
    fam = mutant.family
    if fam.depths is not None:
        return coord_check(fam.build, width=fam.widths[0], depths=list(fam.depths), **run, **kwargs)
    return coord_check(fam.build, list(fam.widths), **run, **kwargs)


# -- scoring ----------------------------------------------------------------------------------------------------------

def _covers(planted: str, named: str) -> bool:
    return named == planted or named.startswith(planted + ".") or planted == "*"


def _cause_rows(verdict: Any) -> list[dict[str, Any]]:
    """The causes of the configuration that decides ``verdict``, first first (the depth verdict's for a depth sweep),
    as dicts with ``kind``, ``measure``, ``modules``, ``line``."""
    depth = getattr(verdict, "depth", None)
    if depth is not None and len(getattr(depth, "causes", ())) and getattr(verdict, "width_status", "") != "pass":
        return [dict(kind=r.kind, measure=r.measure, modules=["*"], line=r.line) for r in depth.causes.itertuples()]
    causes = verdict.causes
    if causes.empty or verdict.configs.empty:
        return []
    rank = {"fail": 2, "inconclusive": 1}
    cid = verdict.configs.assign(_r=verdict.configs["status"].map(rank).fillna(0)).sort_values(
        "_r", ascending=False, kind="stable")["config_id"].iloc[0]
    mine = causes[causes["config_id"] == cid].sort_values("order", kind="stable")
    return [dict(kind=r.kind, measure=r.measure, modules=list(r.modules), line=r.line) for r in mine.itertuples()]


def claims(cause: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``[(module, knob)]`` a cause's fix would change: its modules and the knob of its kind (an audit row's: the
    quantity it measured). A ``candidates`` cause claims nothing (it names no single fix)."""
    kind = str(cause["kind"])
    if kind in ("candidates", "dynamics"):
        return []
    if kind == "audit":
        knob = AUDIT_KNOB.get(str(cause["measure"]).removeprefix("audit:"), "?")
    else:
        knob = KIND_KNOB.get(kind, kind)
    return [(str(m), knob) for m in cause["modules"]]


@dataclass
class Score:
    """A mutant's verdict against its plants."""

    key: str
    planted: str  # the plants' knobs, "+"-joined ("" for a base)
    status: str
    first: str  # the first cause's line ("" without one)
    outcome: str  # exact | right knob, other module | right module, other knob | candidates | wrong | no cause | pass
    # | noted (a PASS whose notes name every plant: a knob no judged series shows, named as a forecast)
    named: int  # plants some cause names, or a note of what no series shows yet
    plants: int
    wrong: list[str] = field(default_factory=list)  # the lines of causes whose fix changes a knob that is right

    @property
    def exact(self) -> bool:
        return self.outcome == "exact"

    @property
    def all_named(self) -> bool:
        return self.named == self.plants


def _matches(claim: tuple[str, str], plant: Plant) -> bool:
    module, knob = claim
    return knob == plant.knob and any(_covers(m, module) for m in plant.modules)


def score(mutant: Mutant, verdict: Any) -> Score:
    """Score ``verdict`` (a :class:`coordcheck.judge.verdict.Verdict`) against ``mutant``'s plants (module
    docstring)."""
    rows = _cause_rows(verdict)
    plants = mutant.plants
    planted = "+".join(p.knob for p in plants)
    wrong = [r["line"] for r in rows if any(not any(_matches(c, p) for p in plants) for c in claims(r))]
    quiet = [dict(r) for r in getattr(verdict, "quiet", pd.DataFrame()).to_dict("records")]
    named = sum(any(_matches(c, p) for r in [*rows, *quiet] for c in claims(r)) for p in plants)  # a cause or a note
    status = str(verdict.status)
    if not plants:
        outcome = "pass" if status == "pass" else "wrong" if wrong else "no cause"
        return Score(mutant.key, planted, status, rows[0]["line"] if rows else "", outcome, 0, 0, wrong)
    if not rows:
        noted = all(any(_matches(c, p) for r in quiet for c in claims(r)) for p in plants)
        outcome = "noted" if noted else "pass" if status == "pass" else "no cause"  # an undecided verdict's note too
        return Score(mutant.key, planted, status, "", outcome, 0, len(plants), wrong)
    first = rows[0]
    mine = claims(first)
    if str(first["kind"]) == "candidates":
        outcome = "candidates"
    elif mine and all(any(_matches(c, p) for p in plants) for c in mine):
        outcome = "exact"
    elif any(c[1] == p.knob for c in mine for p in plants):
        outcome = "right knob, other module"
    elif any(any(_covers(m, c[0]) for m in p.modules) for c in mine for p in plants):
        outcome = "right module, other knob"
    else:
        outcome = "wrong"
    return Score(mutant.key, planted, status, first["line"], outcome, named, len(plants), wrong)


def scores_frame(scores: Sequence[Score]) -> pd.DataFrame:
    """One row per scored mutant."""
    return pd.DataFrame([dict(key=s.key, family=s.key.partition("/")[0], planted=s.planted, status=s.status,
                              outcome=s.outcome, named=s.named, plants=s.plants, wrong=len(s.wrong),
                              first=s.first, wrong_lines=" | ".join(s.wrong)) for s in scores])


def exponent_text(exponent: float) -> str:
    return "0" if math.isclose(exponent, 0.0) else f"{exponent:+g}"
