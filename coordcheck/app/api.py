"""Python API: ``coord_check(build, widths=[...])`` runs the sweep in-process.

Stage: orchestration (the notebook / test-suite twin of the Hydra app). Input: a builder
``build(width, **kwargs) -> nn.Module`` and a list of widths. Output: a
:class:`CoordCheckResult` whose ``.frame`` is the same tidy frame the CLI writes
(``coordcheck.core.frame`` schema), produced by the same engine (``coordcheck.run.train``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args
from pathlib import Path

import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm

from coordcheck.setup import data as data_mod
from coordcheck.setup import models
from coordcheck.setup.data import Batch, as_batch
from coordcheck.setup.depth import Depth, DepthScaling, sweep_axes
from coordcheck.setup.device import check_compile, check_precision, resolve_device
from coordcheck.setup.experts import check_experts, with_experts
from coordcheck.setup.parallel import as_parallel
from coordcheck.core.errors import CoordCheckError
from coordcheck.core.frame import DEFAULT_TENSORS, STATS, concat_frames, digest
from coordcheck.setup.init import resolve_init
from coordcheck.setup.optim import OPTIMIZERS, with_mu
from coordcheck.setup.parametrization import (
    PARAMETRIZATIONS,
    Parametrization,
    model_batch,
    qualified_name,
    short_name,
)
from coordcheck.report import Report, build_report, environments, write_report
from coordcheck.report.knobs import DEFAULT_LAYOUT
from coordcheck.run.train import LossFn, OptimizerFactory, RunIdentity, cross_entropy, resolve_seeds, run_width
from coordcheck.judge.verdict import Rules, Verdict

__all__ = ["coord_check", "CoordCheckResult", "PlotKind"]

log = logging.getLogger("coordcheck")

PlotKind = Literal["coords", "causes", "depth", "grid"]  # the figures of CoordCheckResult.plot

DATA: dict[str, Callable[..., Batch]] = {
    "tokens": data_mod.tokens, "text": data_mod.text, "gaussian": data_mod.gaussian,
}


@dataclass
class CoordCheckResult:
    """What ``coord_check`` returns: the tidy frame, per-width facts, and the verdict on demand.

    ``.slopes`` (tidy slopes table), ``.verdict`` (:class:`coordcheck.judge.verdict.Verdict`),
    ``.passed``, ``.audit`` (the measured facts, :mod:`coordcheck.judge.facts`), ``.report()`` (markdown text),
    ``.write(dir)`` (every report file) and ``.plot(path)`` are computed lazily with
    ``rules`` (default :class:`coordcheck.judge.verdict.Rules`).
    """

    frame: pd.DataFrame
    facts: list[dict] = field(default_factory=list)
    rules: Rules = field(default_factory=Rules)

    @functools.cached_property
    def _report(self) -> Report:
        report = build_report(self.frame, rules=self.rules, facts=self.facts)
        report.environment = environments(self.facts)
        return report

    @property
    def slopes(self) -> pd.DataFrame:
        return self._report.slopes

    @property
    def verdict(self) -> Verdict:
        return self._report.verdict

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    @functools.cached_property
    def audit(self) -> pd.DataFrame:
        """The measured facts (:func:`coordcheck.judge.facts.audit_table`): one row per (configuration, parameter) —
        class, init std, learning rate, weight decay, Adam ε, output multiplier, each as an exponent in width beside
        what muP expects; judged under ``parametrization=mup|sp``."""
        return self._report.audit

    def report(self) -> str:
        """The compliance report as markdown (verdict first)."""
        return self._report.markdown()

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        """In a notebook: the verdict, the causes and the coord-check figure (a tooltip per line: the modules it pools,
        their slopes and causes), the rest of the report folded (:func:`coordcheck.report.html.fragment`)."""
        from coordcheck.report.html import notebook_bundle

        v = self.verdict
        return notebook_bundle(f"coordcheck: {v.status.upper()} — {v.reason}", self.report(), status=v.status,
                               figure=self._figure_html, open_sections=("Cause",))

    @functools.cached_property
    def _figure_html(self) -> str:
        """The coord-check figure (the guide layout, as the report draws it) as inline SVG, drawn once."""
        from coordcheck.report.html import coord_figures_html, drawn, key_of

        def draw() -> str:
            import matplotlib.pyplot as plt

            from coordcheck.plot import plot_coords
            from coordcheck.report import coord_figure_options

            frame = self._report.frame  # the judged roles: the panels the tooltips name
            fig = plot_coords(frame, **coord_figure_options(self.verdict))
            try:
                key = key_of(*sorted(self.frame["config_id"].unique()), len(frame))
                return coord_figures_html(fig, frame, self.verdict, "guide", key=key)[0]
            finally:
                plt.close(fig)

        return drawn(draw)

    def write(self, out_dir: str | Path, *, figures: bool = True, size: str = "paper",
              layout: Literal["guide", "grid"] = DEFAULT_LAYOUT) -> Path:
        """Write report.md, report.json, the tables and (``figures``) the figures into ``out_dir``, as a sweep's
        ``report/`` holds them (:func:`coordcheck.report.write_report`); return the path of report.md."""
        return write_report(self._report, out_dir, figures=figures, size=size, layout=layout)

    def plot(self, path: str | Path | None = None, *, kind: PlotKind = "coords",
             layout: Literal["guide", "grid"] = DEFAULT_LAYOUT, **kwargs: object):
        """A figure of the result; saved as PDF + PNG when ``path`` is given. The verdict is its caption (under it, as a
        paper prints it; ``caption=`` your own, ``title=`` one above it).

        ``kind="coords"``: the coord-check figure (``coordcheck.plot.plot_coords``), in ``layout="guide"`` (the
        default, the paper figure: a panel per kind of activation, a line per step) or ``"grid"`` (a panel per step,
        a line per module, the worst offenders highlighted). ``kind="causes"``: which knob — each parameter's measured
        width exponents against the band muP allows, violators marked (``coordcheck.plot.plot_causes`` of
        ``verdict.evidence``; ``layout`` does not apply). ``kind="depth"`` (a depth sweep): each kind of activation
        against depth, a line per step (``coordcheck.plot.plot_depth``); ``kind="grid"`` (a width x depth grid): the
        width slope per depth beside the depth slope per width (``coordcheck.plot.plot_grid_slopes``); both name
        their rows by the depth scaling when it differs. ``kwargs`` go to the plotting function.
        """
        if kind == "causes":
            from coordcheck.plot import plot_causes

            return plot_causes(self.verdict.evidence, path, **{"caption": self.verdict.caption, **kwargs})
        if kind in ("depth", "grid"):
            from coordcheck import plot

            draw = plot.plot_depth if kind == "depth" else plot.plot_grid_slopes
            defaults = {"caption": self.verdict.caption, "labels": plot.family_labels(self.frame, self.facts)}
            try:
                return draw(self.frame, path, **{**defaults, **kwargs})
            except ValueError as e:  # not a depth sweep / not a grid: say so in one line
                raise CoordCheckError(f"plot(kind={kind!r}): {e}") from None
        if kind != "coords":
            raise CoordCheckError(f"kind must be one of {', '.join(get_args(PlotKind))} (got {kind!r})")
        from coordcheck.plot import plot_coords
        from coordcheck.report import coord_figure_options

        defaults = coord_figure_options(self.verdict, row=str(kwargs.get("row", "parametrization")), layout=layout)
        return plot_coords(self.frame, path, layout=layout, **{**defaults, **kwargs})


def _default_data(build: Callable, build_kwargs: dict, width: int, base_width: int) -> Batch:
    """The built-in models' own data; any other model's read off its layers (one log line says what)."""
    if build in (models.gpt, models.GPT):
        return data_mod.tokens(vocab_size=build_kwargs.get("vocab_size", 256),
                               seq_len=min(32, build_kwargs.get("context", 64)))
    if build in (models.mlp, models.MLP):
        return data_mod.gaussian(dim=build_kwargs.get("in_dim", 32), n_classes=build_kwargs.get("out_dim", 10))
    builder = functools.partial(build, **build_kwargs) if build_kwargs else build
    batch, said = model_batch(builder, width, base_width)
    log.info("data: %s (read off the model; pass data= to choose)", said)
    return batch


def coord_check(
    build: Callable[..., nn.Module],
    widths: Sequence[int] | None = None,
    *,
    width: int | None = None,
    depths: Sequence[int] | None = None,
    base_depth: int = 2,
    depth_scaling: str | DepthScaling = "none",
    depth_key: str = "auto",
    experts: Sequence[int] | None = None,
    experts_key: str = "auto",
    granularity: bool = False,
    pool_experts: bool = True,
    parallel: str | Callable[[nn.Module], nn.Module] | None = None,
    parametrization: str | Parametrization = "mup",
    optimizer: str | OptimizerFactory = "adam",
    lr: float = 1e-2,
    steps: int = 10,
    seeds: int | Sequence[int] = 3,
    data: str | Batch | tuple[torch.Tensor, torch.Tensor] | None = None,
    base_width: int = 128,
    loss: LossFn | Literal["model"] | None = None,
    output: int | str | None = None,
    forward_targets: bool | str = False,
    grad_clip: float | None = None,
    device: str = "auto",
    precision: str = "fp32",
    compile: bool = False,
    tensors: Sequence[str] = DEFAULT_TENSORS,
    stats: Sequence[str] = STATS,
    progress: bool = True,
    rules: Rules | None = None,
    init: str | Callable[..., None] | None = None,
    **build_kwargs: object,
) -> CoordCheckResult:
    """Train ``build(width, **build_kwargs)`` at each width for ``steps`` updates and probe it.

    ``parametrization``: ``"mup"`` (mup package, Mu* optimizers), ``"sp"`` (standard, torch
    optimizers) or ``"none"`` (model and optimizer as given). ``optimizer``: ``"adam"``,
    ``"adamw"``, ``"sgd"``, ``"muon"``, ``"mup_groups"`` (muP's learning rates on a plain torch AdamW, the growing
    dimensions found from the builder at two widths: :func:`coordcheck.setup.optim.mup_groups`) or a factory
    ``factory(model, lr) -> Optimizer``. ``init``: ``None`` / ``"none"`` (the model's own), ``"mup"`` (hidden
    matrices at std ∝ fan_in^-1/2 from the model's std at ``base_width``: :func:`coordcheck.setup.init.mup_init`) or a
    callable ``init(model, **context)``. ``data``: a
    name (``"tokens"``, ``"text"``, ``"gaussian"``), a ``Batch`` or an ``(inputs, targets)``
    pair; default: the built-in model's own. ``loss(output, targets)``: default
    cross-entropy over the last dimension; ``"model"`` uses the loss the model returns (a
    ``loss`` key or attribute, or the last scalar of a tuple). ``output``: the index or key of
    the logits when the model returns a tuple or dict (e.g. ``0`` for ``(logits, loss)``).
    ``forward_targets``: call ``model(inputs, targets)`` (True) or ``model(inputs, **{name:
    targets})`` (a string). ``grad_clip``: clip the global gradient norm before each update.
    ``base_width``: the width at which muP equals standard parametrization (where ``lr`` was
    tuned); also passed to a builder whose signature has ``base_width``.
    ``device``: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``, ``"cuda:N"`` — models are built
    on it directly. ``precision``: ``"fp32"``, ``"bf16"`` (autocast around the forward) or ``"fp16"``
    (autocast and a gradient scaler); statistics are reduced in float32 either way. ``compile=True`` is
    refused with the reason (:mod:`coordcheck.setup.device`).
    ``rules``: the verdict's numbers (:class:`coordcheck.judge.verdict.Rules`).

    Depth (:mod:`coordcheck.setup.depth`): ``depths=[2, 4, 8, 16]`` with ``width=128`` sweeps the number of residual
    blocks
    at one width (``widths=[...]`` and ``depths=[...]`` together: the grid). The builder gets each depth by
    ``depth_key`` (``"auto"``: the first of ``depth``, ``n_layer``, ``n_layers``, ``num_layers``, ... that it takes),
    and ``base_depth`` / ``depth_alpha`` when its signature names them. ``depth_scaling``: ``"none"``,
    ``"depth_mup"`` (branches x (depth/base_depth)^-1/2), ``"completep"`` (^-1) or a
    :class:`coordcheck.setup.depth.DepthScaling`; under ``mup``/``sp`` the harness applies its optimizer side (Adam's lr
    and ε of residual-block parameters).

    Experts (:mod:`coordcheck.setup.experts`): ``experts=[4, 8, 16]`` with ``width=128`` sweeps a mixture of experts'
    count at one width, judged by the experts verdict (``verdict.experts``: :mod:`coordcheck.judge.experts`). The
    builder gets it by ``experts_key`` (``"auto"``: the first of ``n_experts``, ``num_experts``,
    ``num_local_experts``, ``n_routed_experts`` it takes); ``granularity=True`` keeps the total expert width fixed
    (the built-in MoE's ``expert_ratio`` times its own count over each count). ``pool_experts``: experts kept as a list
    of modules are one module per layer in the frame (``experts.*.fc1``; False: each expert its own).

    ``parallel`` (:mod:`coordcheck.setup.parallel`): ``"ddp"`` or a function ``wrap(model) -> module`` trains the model
    wrapped, each ``torchrun`` process on its equal share of the batch, the statistics reduced across the processes
    exactly (every process gets the same result); ``None``: one process.
    """
    device = resolve_device(device)
    par = as_parallel(parallel)
    precision = check_precision(precision)
    check_compile(compile)
    widths, depth_list, scaling = sweep_axes(widths, width, depths, depth_scaling)
    seeds = resolve_seeds(seeds)
    builder = functools.partial(build, **build_kwargs) if build_kwargs else build

    if isinstance(parametrization, str):
        if parametrization not in PARAMETRIZATIONS:
            raise CoordCheckError(f"unknown parametrization {parametrization!r}: use one of {sorted(PARAMETRIZATIONS)}")
        parametrization = PARAMETRIZATIONS[parametrization]()
    if isinstance(optimizer, str):
        if optimizer not in OPTIMIZERS:
            raise CoordCheckError(f"unknown optimizer {optimizer!r}: use one of {sorted(OPTIMIZERS)} or a factory")
        opt_name = optimizer
        factory = with_mu(OPTIMIZERS[optimizer], parametrization.mu_optimizer)
    else:
        opt_name, factory = short_name(qualified_name(optimizer), "coordcheck.setup.optim"), optimizer

    if data is None:
        batch = _default_data(build, build_kwargs, widths[0], base_width)
    elif isinstance(data, str):
        if data not in DATA:
            raise CoordCheckError(f"unknown data {data!r}: use one of {sorted(DATA)} or pass (inputs, targets)")
        batch = DATA[data]()
    else:
        batch = as_batch(data)

    model_name = short_name(qualified_name(build), "coordcheck.setup.models")
    if loss is not None and loss != "model" and not callable(loss):
        raise CoordCheckError(f"loss must be a callable loss(output, targets), 'model' or None, got {loss!r}")
    key = [model_name, repr(sorted(build_kwargs.items())), parametrization.name, opt_name, lr, batch.name,
           steps, base_width, seeds, list(tensors), list(stats)]
    if (output, loss, forward_targets, grad_clip) != (None, None, False, None):  # keeps earlier ids unchanged
        key += [output, loss if loss == "model" else qualified_name(loss) if loss else None, forward_targets, grad_clip]
    if precision != "fp32":
        key += [precision]
    if not pool_experts:  # keeps earlier ids unchanged
        key += ["pool_experts", False]
    init_fn = resolve_init(init)
    if init_fn is not None:
        key += ["init", init if isinstance(init, str) else qualified_name(init)]
    if depths is not None or scaling.active:  # keeps earlier ids unchanged
        key += ["depth", base_depth, scaling.name, scaling.alpha, depth_key]
    expert_list: list[int | None] = [None] if experts is None else [check_experts(e) for e in experts]
    if experts is not None:
        key += ["experts", experts_key, bool(granularity)]
    jobs = [(w, d, RunIdentity(
        config_id=digest(key if d is None and e is None else [*key, d] if e is None else [*key, d, e]),
        family_id=digest(key), model=model_name, parametrization=parametrization.name, optimizer=opt_name,
        lr=float(lr), data=batch.name, data_policy=batch.policy, depth=d or 0, experts=e or 0,
    )) for e in expert_list for d in depth_list for w in widths]

    def train(width: int, depth: int | None, identity: RunIdentity, tensors: Sequence[str], steps: int,
              bar: object) -> tuple[pd.DataFrame, dict]:
        build_e = with_experts(builder, identity.experts, experts_key, granularity) if identity.experts else builder
        return run_width(
            build_e, width, seeds=seeds, parametrization=parametrization, optimizer=factory, lr=lr,
            batch=batch, steps=steps, identity=identity,
            base_width=base_width,
            loss_fn=loss or cross_entropy, tensors=tensors, stats=stats, progress=bar,
            output=output, forward_targets=forward_targets, grad_clip=grad_clip, device=device,
            precision=precision, init=init_fn,
            depth=Depth(depth=depth, base_depth=base_depth, scaling=scaling, key=depth_key), pool_experts=pool_experts,
            parallel=par,
        )

    bar = tqdm(total=len(jobs) * len(seeds) * (steps + 1), desc="coord check", disable=not progress)
    frames, facts = [], []
    try:
        for width, depth, identity in jobs:
            bar.set_postfix(width=width, **({} if depth is None else {"depth": depth}),
                            **({"experts": identity.experts} if identity.experts else {}))
            frame, fact = train(width, depth, identity, tensors, steps, bar)
            frames.append(frame)
            facts.append(fact)
    finally:
        bar.close()
    return CoordCheckResult(concat_frames(frames), facts, rules or Rules())
