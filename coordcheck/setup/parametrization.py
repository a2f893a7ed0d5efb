"""Parametrizations: how a freshly built model is turned into the model that is trained.

Stage: parametrize. Input: a builder ``build(width, **kw)``, the width, ``base_width`` and a
seed. Output: the seeded model, ready for its optimizer (``coordcheck.setup.optim``).

* ``mup`` — base and delta shapes come from the same builder at ``base_width`` and
  ``2 * base_width``, built on the meta device inside ``torch.random.fork_rng`` (no wide
  tensors allocated, the global RNG untouched), once per job. The trained model gets
  ``mup.set_base_shapes`` and then its own ``reset_parameters()`` if it has one, as in the
  mup examples; a layer whose own ``reset_parameters`` that call ran again (a drawn ``MuReadout``, an
  ``nn.Linear``'s bias) gets the rescale ``set_base_shapes`` gave its standard init back
  (:func:`_reset_keeping_mup`). Optimizers are MuAdam / MuAdamW / MuSGD.
* ``sp`` — the same model in standard parametrization: base shapes equal to the model's own
  (every width multiplier is 1, so MuReadout is a plain Linear; the dimensions that grow are
  still marked, from the same two meta builds) and torch optimizers. The control that must
  fail a coord check.
* ``none`` — the model is used exactly as built (models that implement muP by hand, with
  their own optimizer factory ``factory(model, lr)``).

Seeding contract: ``torch.manual_seed(seed)`` immediately before ``build(width)``.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from mup import MuReadout, make_base_shapes, set_base_shapes
from mup.infshape import InfShape
from mup.shape import zip_infshapes
from torch import nn

from coordcheck.core.errors import CoordCheckError, check_width
from coordcheck.core.typos import did_you_mean
from coordcheck.setup.blocks import find_blocks
from coordcheck.setup.data import Batch, batch_for

__all__ = ["Parametrization", "Mup", "Standard", "AsGiven", "build_model", "check_builder", "PARAMETRIZATIONS",
           "base_shapes", "model_batch", "PLAIN_READOUT", "PLAIN_READOUT_FIX", "width_infshapes", "named_keywords",
           "routers"]

Builder = Callable[..., nn.Module]


def call_builder(build: Builder, width: int, base_width: int | None = None) -> nn.Module:
    """``build(width=width)`` with one-line errors for the usual mistakes.

    A builder whose signature names ``base_width`` also gets it (models that implement muP by
    hand need it for their multipliers), so it is set once, in the config.
    """
    check_builder(build)
    kwargs = {"width": width, **named_keywords(build, base_width=base_width)}
    try:
        model = build(**kwargs)
    except TypeError as e:
        if "argument" not in str(e):  # a TypeError from inside the builder is the builder's own
            raise
        raise CoordCheckError(
            f"model builder {qualified_name(build)} cannot be called as build(width={width}, **model config): {e}"
        ) from None
    if not isinstance(model, nn.Module):
        raise CoordCheckError(
            f"model builder {qualified_name(build)} returned {type(model).__name__}, not an nn.Module")
    return model


def named_keywords(fn: Callable[..., object], **available: object) -> dict[str, object]:
    """Those of ``available`` (not None) that ``fn``'s signature names and a ``functools.partial`` has not bound
    already: how the harness hands a builder ``base_width``, and an optimizer factory or an init ``build``,
    ``width``, ``base_width``, ``seed`` — only to the ones that ask (``**kwargs`` asks for none)."""
    try:
        params = inspect.signature(getattr(fn, "func", fn)).parameters
    except (TypeError, ValueError):
        return {}
    bound = fn.keywords if isinstance(fn, functools.partial) else {}
    return {k: v for k, v in available.items()
            if v is not None and k in params and k not in bound
            and params[k].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}


def check_builder(build: Callable[..., object]) -> inspect.Signature | None:
    """The builder's signature, if it has one; one line if it cannot take ``width`` (nothing is built, so the
    command line checks it before any job runs)."""
    try:
        sig = inspect.signature(getattr(build, "func", build))  # a functools.partial: its function
    except (TypeError, ValueError):
        return None
    if "width" not in sig.parameters and not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        raise CoordCheckError(
            f"model builder {qualified_name(build)} has no `width` parameter: "
            "it must be build(width: int, **kwargs) -> nn.Module"
        )
    return sig


def check_builder_keywords(build: Callable[..., object], keywords: Mapping[str, object], width: int,
                           base_width: int | None = None) -> None:
    """One line, before any job runs, for a keyword the builder does not take (``+model.n_layers=4`` where it takes
    ``n_layer``): from its signature when it names every keyword it takes; else (``**kwargs`` handed on to a config
    class) from a build on the meta device — nothing allocated, the global RNG untouched — whose "unexpected keyword
    argument" is the same mistake. Any other error is the job's to report."""
    if not keywords:
        return
    sig = check_builder(build)
    if sig is None:
        return
    params = sig.parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = [k for k in keywords if k not in params]
        if unknown:
            takes = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
            hint = did_you_mean(unknown[0], takes, prefix="model.")
            raise CoordCheckError(f"model.{unknown[0]}: {qualified_name(build)} takes no keyword {unknown[0]!r}{hint} "
                                  f"(it takes {', '.join(takes)}): remove it or fix its name")
        return
    kwargs = {"width": width, **named_keywords(build, base_width=base_width), **keywords}
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            build(**kwargs)
    except TypeError as e:
        found = re.search(r"unexpected keyword argument '(\w+)'", str(e))
        if found and found.group(1) in keywords:
            raise CoordCheckError(f"model.{found.group(1)}: {qualified_name(build)} (or what it hands its keywords to) "
                                  f"takes no keyword {found.group(1)!r}: remove it or fix its name") from None
    except Exception:  # noqa: BLE001 - a builder that cannot be built on the meta device: its jobs say why
        pass


def qualified_name(obj: object) -> str:
    """``module.qualname`` of a callable (of its function, for a functools.partial from Hydra's _partial_)."""
    f = getattr(obj, "func", obj)
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', type(f).__name__)}"


def short_name(target: str, package: str) -> str:
    """``coordcheck.setup.models.gpt`` -> ``gpt``; a user's dotted path stays whole."""
    return target.rsplit(".", 1)[-1] if target.startswith(package + ".") else target


# What a structural mismatch with muP is called and how it is fixed (job facts ``structure``; the judge makes each a
# cause: coordcheck.judge.structure.structure_causes).
PLAIN_READOUT = "maps the width to a fixed size but is not a mup.MuReadout"
PLAIN_READOUT_FIX = ("make it a mup.MuReadout, or use parametrization=none with your own output multiplier "
                     "(logits * base_width / width)")


@dataclass
class Parametrization:
    """Base class; subclasses say how to turn ``build(width)`` into the trained model."""

    name: str = "none"
    mu_optimizer: bool = False  # read by the optimizer configs: Mu* variants under mup
    structure: list[dict] = field(default_factory=list)  # what in the last applied model does not fit (job facts)

    def prepare(self, build: Builder, base_width: int) -> None:
        """Per-job work shared by every seed (e.g. base shapes)."""

    def apply(self, model: nn.Module) -> nn.Module:
        return model


@dataclass
class Mup(Parametrization):
    name: str = "mup"
    mu_optimizer: bool = True
    _base: dict | None = None

    def prepare(self, build: Builder, base_width: int) -> None:
        self._base = base_shapes(build, base_width)

    def apply(self, model: nn.Module) -> nn.Module:
        """mup's base shapes on ``model``. A plain ``nn.Linear`` that maps the width to a fixed size (a readout mup
        cannot scale) is trained as it is and recorded in :attr:`structure`: the verdict fails it, with what it
        measured grows (mup's own ``set_base_shapes`` assert would stop the run instead)."""
        set_base_shapes(model, self._base, do_assert=False)
        self.structure = []
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear) and not isinstance(module, MuReadout):
                fan_out, fan_in = module.weight.infshape[:2]
                if fan_in.isinf() and not fan_out.isinf():
                    self.structure.append({"module": name or "(root)", "type": type(module).__name__,
                                           "problem": PLAIN_READOUT,
                                           "fix": PLAIN_READOUT_FIX})
        reset = getattr(model, "reset_parameters", None)
        if callable(reset):
            _reset_keeping_mup(model, reset)
        return model


def _reset_keeping_mup(model: nn.Module, reset: Callable[[], None]) -> None:
    """``reset()`` (the model's own ``reset_parameters``), then mup's rescale again on each layer whose own
    ``reset_parameters`` that call ran: ``set_base_shapes`` turned their standard init into muP's (a drawn
    ``MuReadout``'s weight and bias times ``width_mult ** 0.5``: std constant in width beside its 1/width multiplier;
    an ``nn.Linear``'s or convolution's bias times ``fan_in_mult ** 0.5``), and the standard init drawn again would
    undo it — a readout at std ∝ fan_in^-1/2 behind a 1/width multiplier, whose updates then shrink the gradient of
    every layer before it (visible under SGD). A layer the model initialises its own way (``nn.init`` on its weight)
    is left as the model set it."""
    from mup.layer import rescale_linear_bias
    from torch.nn.modules.conv import _ConvNd

    ran: list[nn.Module] = []
    layers = [m for m in model.modules() if m is not model and isinstance(m, (MuReadout, nn.Linear, _ConvNd))
              and "reset_parameters" not in vars(m)]
    for m in layers:
        def recorded(_m: nn.Module = m, _own: Callable[[], None] = m.reset_parameters) -> None:
            ran.append(_m)
            _own()
        m.reset_parameters = recorded
    try:
        reset()
    finally:
        for m in layers:
            del m.reset_parameters
    with torch.no_grad():
        for m in dict.fromkeys(ran):
            if not all(hasattr(p, "infshape") for p in m.parameters(recurse=False)):
                continue
            if isinstance(m, MuReadout):
                if not m.readout_zero_init:
                    m._has_rescaled_params = False
                    m._rescale_parameters()
            elif m.bias is not None:
                m._has_rescaled_params = False
                rescale_linear_bias(m)


@dataclass
class Standard(Parametrization):
    name: str = "sp"
    _base: dict | None = None

    def prepare(self, build: Builder, base_width: int) -> None:
        # Which dimensions grow, for optimizer=muon; SP itself needs no base shapes, so a builder that cannot be built
        # at base_width runs as before, with no dimension marked.
        try:
            self._base = base_shapes(build, base_width)
        except Exception:  # noqa: BLE001 - the builder's own error surfaces when the trained model is built
            self._base = None

    def apply(self, model: nn.Module) -> nn.Module:
        # width_mult 1 everywhere: SP. The width dimensions stay marked infinite (base dim = this dim), so that
        # p.infshape says which dimensions grow, as under mup.
        shapes = {n: p.shape for n, p in model.named_parameters()}
        delta = None
        if self._base is not None and set(self._base) == set(shapes):
            delta = {n: [d + 1 if b.isinf() else d for b, d in zip(self._base[n], shape)]
                     for n, shape in shapes.items()}
        set_base_shapes(model, shapes if delta else None, delta=delta, do_assert=False)
        return model


@dataclass
class AsGiven(Parametrization):
    name: str = "none"

    def apply(self, model: nn.Module) -> nn.Module:
        for name, module in model.named_modules():
            if isinstance(module, MuReadout) and not hasattr(module.weight, "infshape"):
                raise CoordCheckError(
                    f"parametrization=none uses the model as given, but its MuReadout {name or '(root)'} has no base "
                    f"shapes: use parametrization=mup (or sp), or call mup.set_base_shapes in the builder"
                )
        return model


def model_batch(build: Builder, width: int, base_width: int | None = None) -> tuple[Batch, str]:
    """The batch ``build(width)`` takes when no data is given (:func:`coordcheck.setup.data.batch_for`), read off the
    model built on the meta device (nothing allocated, the global RNG untouched); a model that cannot be built there
    is built on the CPU."""
    with torch.random.fork_rng(devices=[]):
        try:
            with torch.device("meta"):
                model = call_builder(build, width, base_width)
        except CoordCheckError:
            raise
        except Exception:  # noqa: BLE001 - a builder that needs real tensors (numpy, .item()): build it for real
            model = call_builder(build, width, base_width)
    return batch_for(model)


def base_shapes(build: Builder, base_width: int) -> dict:
    """mup base shapes from the builder at ``base_width`` and ``2 * base_width``, built on the meta device inside
    ``torch.random.fork_rng`` (no tensors allocated, the global RNG untouched)."""
    base_width = check_width(base_width, key="base_width")
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        base = call_builder(build, base_width, base_width)
        delta = call_builder(build, 2 * base_width, base_width)
    return make_base_shapes(base, delta)


def width_infshapes(model: nn.Module, build: Builder, base_width: int, *, who: str) -> dict[str, InfShape]:
    """mup's ``InfShape`` of each of ``model``'s parameters against the builder's :func:`base_shapes`, computed
    without touching the model (no ``infshape`` attribute set: ``parametrization=none`` keeps it as given, ``sp``
    keeps its own): ``ninf()`` counts the dimensions that grow with width, ``width_mult()`` is the main one's
    ``dim / base_dim`` (fan-in for a matrix), as ``mup.set_base_shapes`` would make them. ``who`` names the caller in
    the one-line error for a model in which nothing grows with width or whose parameters change with width."""
    base = base_shapes(build, base_width)
    if not any(d.isinf() for shape in base.values() for d in shape):
        raise CoordCheckError(
            f"{who}: no parameter of the model changes shape between width {base_width} and {2 * base_width}, so "
            f"none can be scaled with width: make build(width=...) set the layer sizes")
    shapes = {name: p.shape for name, p in model.named_parameters()}
    if set(base) != set(shapes):
        extra = sorted(set(shapes) ^ set(base))[:3]
        raise CoordCheckError(
            f"{who}: the model's parameters differ between widths ({', '.join(extra)}, ...): the builder must "
            f"make the same parameters at every width, only their sizes may change")
    infshapes = zip_infshapes(base, shapes)
    many = [name for name, s in infshapes.items() if s.ninf() > 2]
    if many:
        raise CoordCheckError(f"{who}: parameter {many[0]} has more than two dimensions that grow with width "
                              f"(mup has no rule for it): keep at most fan-in and fan-out width-sized")
    return infshapes


def routers(model: nn.Module, infshapes: Mapping[str, InfShape]) -> set[str]:
    """The names of the output-like matrices inside the model's blocks (:func:`coordcheck.setup.blocks.find_blocks`):
    two dimensions, only the last (fan-in) growing with width — a mixture of experts' router, width → experts — but
    not embeddings' tables, MuReadouts, nor the model's last matrix (a readout in a head block of its own; a router
    is followed by its experts). muP treats it as an output weight (Tensor Programs V, Table 3; Małaśnicki
    et al. 2025): without a multiplier in the forward, std ∝ 1/fan_in and learning rate ∝ 1/fan_in. The model's own
    readout sits after the blocks and keeps MuReadout's form (its 1/width multiplier in the forward); so does a
    router that is a ``MuReadout``.
    """
    blocks = find_blocks(model)

    def place(name: str) -> tuple[str, str] | None:  # (its block, its name inside the block), or None: outside
        b = next((b for b in blocks if name.startswith(b + ".")), None)
        return None if b is None else (b, name[len(b) + 1:])

    skip = (MuReadout, nn.Embedding, nn.EmbeddingBag)
    inside = [(name, place(name)) for name, shape in infshapes.items()
              if len(shape) == 2 and shape[1].isinf() and not shape[0].isinf() and place(name) is not None
              and not isinstance(model.get_submodule(name.rpartition(".")[0]), skip)]
    matrices = [name for name, shape in infshapes.items() if len(shape) >= 2]
    if inside and matrices and inside[-1][0] == matrices[-1]:  # the model's last matrix: its readout, in a head block
        inside = inside[:-1]
    return {name for name, _ in inside}


PARAMETRIZATIONS: dict[str, type[Parametrization]] = {"mup": Mup, "sp": Standard, "none": AsGiven}


def build_model(build: Builder, width: int, seed: int, parametrization: Parametrization,
                base_width: int | None = None) -> nn.Module:
    """Seed, build at ``width`` and parametrize; ``parametrization.prepare`` must have run."""
    torch.manual_seed(seed)
    model = call_builder(build, width, base_width)
    return parametrization.apply(model)
