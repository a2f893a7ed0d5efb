"""Depth: the second axis of scaling, and the parametrizations that make it transfer (depth-μP, CompleteP).

Stage: build and parametrize (the depth half). Input: a builder, the job's ``depth`` and ``base_depth``, the
configured :class:`DepthScaling` (``conf/depth_scaling/``) and the optimizer the harness built. Output: the builder's
depth keywords, and the optimizer's parameter groups with the depth factors of the learning rate and Adam's ε.

The rules (CompleteP, Dey et al. 2025, arXiv 2505.01618, Table 1, with m_L = depth / base_depth; depth-μP, Yang et al.
2023, arXiv 2310.02244, is α = ½; the code of EleutherAI nanoGPT-mup's ``completep`` branch applies the same):

* the output of each residual branch (attention, MLP) is multiplied by m_L^−α before it is added to the stream —
  the model's job (the built-in GPT: ``depth_alpha``, ``base_depth``; a user's builder gets ``depth``, ``base_depth``
  and ``depth_alpha`` when its signature names them);
* Adam-family learning rate of every parameter inside a residual block (hidden matrices, in-block norms and biases)
  × m_L^(α−1): × m_L^−½ for depth-μP, no factor for CompleteP; embeddings, final norm and readout keep the base lr;
* Adam's ε of the parameters inside a residual block × m_L^−α (the update of a block parameter is m_L^(α−1) times
  smaller, its gradient m_L^−α: the ε that stays negligible shrinks with it);
* weight decay: no depth factor (AdamW's decoupled decay is λ·lr: it follows the learning rate); initialisation: no
  depth factor — GPT-2's 1/√(2L) on the output projections is what the branch multiplier replaces.

The harness applies the optimizer side (:func:`scale_optimizer`) under ``parametrization=mup`` and ``sp`` with the
built-in Adam-family optimizers and ``mup_groups``; under ``parametrization=none`` the user's optimizer factory does
(it gets ``depth``, ``base_depth`` and ``depth_alpha`` when it names them). Residual blocks are found as the probes
find them (:func:`coordcheck.setup.blocks.find_blocks`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from coordcheck.core.errors import CoordCheckError, check_depth  # noqa: F401  (check_depth: re-exported)
from coordcheck.setup.blocks import find_blocks

__all__ = ["Depth", "DepthScaling", "NO_DEPTH_SCALING", "DEPTH_SCALINGS", "DEPTH_KEYS", "depth_keyword",
           "depth_keywords", "check_depth", "scale_optimizer", "block_parameters", "sweep_axes", "not_adam",
           "NOT_ADAM", "check_scaled_optimizer"]

# Keywords by which builders in the field take their number of blocks, tried in this order by ``depth_key=auto``.
DEPTH_KEYS = ("depth", "n_layer", "n_layers", "num_layers", "num_hidden_layers", "n_blocks", "num_blocks")
ADAM_FAMILY = (torch.optim.Adam, torch.optim.AdamW)
# The built-in optimizer configs (their ``_target_``) whose optimizer is not Adam-family, from the config node alone:
# the command line refuses them with depth scaling before any job runs (a user's factory is seen when it is built).
NOT_ADAM: dict[str, Callable[[Mapping], str | None]] = {
    "coordcheck.setup.optim.sgd": lambda node: "SGD",
    "coordcheck.setup.optim.muon": lambda node: "MuonWithAdamW",
    "coordcheck.setup.optim.mup_groups": lambda node: "SGD" if node.get("kind") == "sgd" else None,
}


@dataclass(frozen=True)
class DepthScaling:
    """A depth parametrization (``conf/depth_scaling/{none,depth_mup,completep}.yaml``): the exponent α of the
    residual-branch multiplier (depth / base_depth)^−α, and the optimizer factors that go with it."""

    name: str = "none"
    alpha: float = 0.0  # 0: no depth scaling; 0.5: depth-μP; 1: CompleteP

    def __post_init__(self) -> None:
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0 <= self.alpha <= 1:
            raise CoordCheckError(f"depth_scaling.alpha must be a number in [0, 1] (0.5 depth-μP, 1 CompleteP), got "
                                  f"{self.alpha!r}")

    @property
    def active(self) -> bool:
        return self.alpha > 0

    def multiplier(self, depth: int, base_depth: int) -> float:
        """The residual-branch multiplier (depth / base_depth)^−α."""
        return (depth / base_depth) ** -self.alpha if self.active else 1.0

    def lr_factor(self, depth: int, base_depth: int) -> float:
        """Adam's learning-rate factor of a residual-block parameter, (depth / base_depth)^(α−1)."""
        return (depth / base_depth) ** (self.alpha - 1) if self.active else 1.0

    def eps_factor(self, depth: int, base_depth: int) -> float:
        """Adam's ε factor of a residual-block parameter, (depth / base_depth)^−α."""
        return (depth / base_depth) ** -self.alpha if self.active else 1.0


NO_DEPTH_SCALING = DepthScaling()
DEPTH_SCALINGS = {"none": NO_DEPTH_SCALING, "depth_mup": DepthScaling("depth_mup", 0.5),
                  "completep": DepthScaling("completep", 1.0)}  # as conf/depth_scaling/ has them


def _parameters(fn: Callable) -> dict[str, inspect.Parameter] | None:
    try:
        return dict(inspect.signature(getattr(fn, "func", fn)).parameters)
    except (TypeError, ValueError):
        return None


def depth_keyword(build: Callable, key: str = "auto", given: Collection[str] = ()) -> str:
    """The keyword by which ``build`` takes its depth: ``key`` itself, or with ``auto`` the first of
    :data:`DEPTH_KEYS` that its signature names or that its config sets (``given``; a ``functools.partial``'s bound
    keywords count: ``model.n_layer`` of the built-in GPT). One line when there is none (the depth cannot be set)."""
    from coordcheck.setup.parametrization import qualified_name

    params = _parameters(build) or {}
    names = {*params, *(build.keywords if isinstance(build, functools.partial) else {}), *given}
    if key != "auto":
        if key not in names and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            raise CoordCheckError(f"depth_key={key}: model builder {qualified_name(build)} has no parameter {key!r}: "
                                  f"set depth_key to the keyword that sets its number of blocks")
        return key
    found = next((k for k in DEPTH_KEYS if k in names), None)
    if found is None:
        raise CoordCheckError(f"depth: model builder {qualified_name(build)} takes none of {', '.join(DEPTH_KEYS)}: "
                              f"set depth_key to the keyword that sets its number of blocks (depth_key=n_layer)")
    return found


def depth_keywords(build: Callable, depth: int | None, base_depth: int | None, scaling: DepthScaling,
                   key: str = "auto") -> dict[str, object]:
    """The keywords the harness adds to ``build(width=...)`` for a depth: ``{<depth key>: depth}``, and
    ``base_depth`` / ``depth_alpha`` where the builder's signature names them. None: the model's own depth."""
    from coordcheck.setup.parametrization import named_keywords

    if depth is None:
        if scaling.active:  # a multiplier needs a depth to scale by
            return named_keywords(build, base_depth=base_depth, depth_alpha=scaling.alpha)
        return {}
    return {depth_keyword(build, key): depth,
            **named_keywords(build, base_depth=base_depth, depth_alpha=scaling.alpha)}


def block_parameters(model: nn.Module) -> set[int]:
    """``id`` of every parameter inside a residual block (:func:`coordcheck.setup.blocks.find_blocks`)."""

    modules = dict(model.named_modules())
    return {id(p) for name in find_blocks(model) for p in modules[name].parameters()}


def not_adam(scaling: DepthScaling, optimizer: str) -> CoordCheckError:
    """The one line for depth scaling with an optimizer that has no Adam learning rate and ε to scale."""
    return CoordCheckError(f"depth_scaling={scaling.name} scales Adam's learning rate and ε with depth; "
                           f"{optimizer} has no such rule here: use optimizer=adam or adamw, or "
                           f"depth_scaling=none with parametrization=none and your own optimizer factory")


def check_scaled_optimizer(scaling: DepthScaling, parametrization: str, target: str, node: Mapping) -> None:
    """Before any job runs: the optimizer config ``node`` (``target``: its ``_target_``) under ``parametrization``
    can take ``scaling``'s optimizer factors (:func:`scale_optimizer`: Adam family; under ``none`` the user's factory
    applies its own). One line (:func:`not_adam`) for the built-in ones that cannot (:data:`NOT_ADAM`)."""
    if not scaling.active or parametrization == "none" or target not in NOT_ADAM:
        return
    name = NOT_ADAM[target](node)
    if name is not None:
        raise not_adam(scaling, name)


def scale_optimizer(opt: torch.optim.Optimizer, model: nn.Module, scaling: DepthScaling, depth: int,
                    base_depth: int) -> torch.optim.Optimizer:
    """Multiply the learning rate and ε of every parameter inside a residual block by
    :meth:`DepthScaling.lr_factor` and :meth:`DepthScaling.eps_factor`: each parameter group is split into its
    in-block and out-of-block parameters (the optimizer has not stepped, so it has no state to move). A no-op without
    depth scaling or at ``depth == base_depth``. Adam-family optimizers only: one line for the others."""
    if not scaling.active:
        return opt
    if not isinstance(opt, ADAM_FAMILY):
        raise not_adam(scaling, type(opt).__name__)
    in_block = block_parameters(model)
    if not in_block:
        raise CoordCheckError(f"depth_scaling={scaling.name}: the model has no residual blocks (modules with "
                              f"parameters in an nn.ModuleList, nn.Sequential or nn.ModuleDict): nothing to scale")
    lr_f, eps_f = scaling.lr_factor(depth, base_depth), scaling.eps_factor(depth, base_depth)
    groups = []
    for g in opt.param_groups:
        params, rest = g["params"], {k: v for k, v in g.items() if k != "params"}
        inside = [p for p in params if id(p) in in_block]
        outside = [p for p in params if id(p) not in in_block]
        if outside:
            groups.append({**rest, "params": outside})
        if inside:
            groups.append({**rest, "params": inside, "lr": rest["lr"] * lr_f, "eps": rest["eps"] * eps_f,
                           "depth_block": True})
    opt.param_groups = []
    for g in groups:
        opt.add_param_group(g)
    return opt


@dataclass(frozen=True)
class Depth:
    """A job's depth: ``depth`` (None: the model's own), ``base_depth``, the :class:`DepthScaling` and the builder's
    depth keyword (``depth_key``; ``auto``: :func:`depth_keyword`). What the engine (``coordcheck.run.train``) asks of
    it:
    the builder with the depth keywords bound, the optimizer factory's keywords, and the optimizer's depth factors."""

    depth: int | None = None
    base_depth: int = 2
    scaling: DepthScaling = field(default_factory=DepthScaling)
    key: str = "auto"

    def __post_init__(self) -> None:
        check_depth(self.depth, optional=True)
        check_depth(self.base_depth, "base_depth")

    @property
    def is_set(self) -> bool:
        """Whether this job sets a depth or scales one (else it is the model as built, and nothing is added)."""
        return self.depth is not None or self.scaling.active

    def builder(self, build: Callable) -> Callable:
        """``build`` with its depth keywords bound (:func:`depth_keywords`); ``build`` itself when there are none."""
        kwargs = depth_keywords(build, self.depth, self.base_depth, self.scaling, self.key)
        return functools.partial(build, **kwargs) if kwargs else build

    def of(self, model: nn.Module) -> int:
        """The depth of ``model``: the one set, else its number of residual blocks."""

        return self.depth if self.depth is not None else max(len(find_blocks(model)), 1)

    def factory_keywords(self, model: nn.Module) -> dict[str, object]:
        """What an optimizer factory may name: ``depth``, ``base_depth``, ``depth_alpha`` (when a depth is set or
        scaled; nothing otherwise, as before depth was an axis)."""
        if not self.is_set:
            return {}
        return {"depth": self.of(model), "base_depth": self.base_depth, "depth_alpha": self.scaling.alpha}

    def scale(self, opt: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        """The optimizer's depth factors (:func:`scale_optimizer`)."""
        if not self.scaling.active:
            return opt
        return scale_optimizer(opt, model, self.scaling, self.of(model), self.base_depth)

    def facts(self) -> dict[str, object]:
        """The job facts of a depth (``job.json``): nothing when no depth is set or scaled."""
        if not self.is_set:
            return {}
        return {"depth": self.depth or 0, "base_depth": self.base_depth, "depth_scaling": self.scaling.name,
                "depth_alpha": self.scaling.alpha}


def sweep_axes(widths: Sequence[int] | None, width: int | None, depths: Sequence[int] | None,
               depth_scaling: str | DepthScaling) -> tuple[list[int], list[int | None], DepthScaling]:
    """The Python APIs' axes (``coord_check``, ``coordcheck.transfer``), checked: the sorted widths (``widths=[...]``
    or one ``width=``), the sorted depths (``[None]``: the model's own) and the :class:`DepthScaling` (a name of
    :data:`DEPTH_SCALINGS` or one given). One line for each mistake."""
    from coordcheck.core.errors import check_width

    if widths is None and width is not None:
        widths = [width]
    elif width is not None:
        raise CoordCheckError("pass widths=[...] or width=..., not both")
    if widths is None or isinstance(widths, (int, str)) or not len(widths):
        raise CoordCheckError(f"widths must be a non-empty list of positive integers, got {widths!r} (or width=W "
                              f"with depths=[...])")
    if depths is not None and (isinstance(depths, (int, str)) or not len(depths)):
        raise CoordCheckError(f"depths must be a non-empty list of positive integers, got {depths!r}")
    scaling = DEPTH_SCALINGS.get(depth_scaling) if isinstance(depth_scaling, str) else depth_scaling
    if not isinstance(scaling, DepthScaling):
        raise CoordCheckError(f"unknown depth_scaling {depth_scaling!r}: use one of {', '.join(DEPTH_SCALINGS)} or a "
                              f"coordcheck.setup.depth.DepthScaling")
    return (sorted({check_width(w) for w in widths}),
            sorted({check_depth(d) for d in depths}) if depths is not None else [None], scaling)
