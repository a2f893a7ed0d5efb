"""Python API: ``coordcheck.transfer(build, widths=[...], lrs=[...])`` runs the learning-rate sweep in-process.

Stage: orchestration (the notebook / test-suite twin of ``python -m coordcheck.transfer``). Same
engine (``coordcheck.transfer.train``), same frame, same verdict and report.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd
from torch import nn
from tqdm.auto import tqdm

from coordcheck.setup import data as data_mod
from coordcheck.setup.depth import Depth, DepthScaling, sweep_axes
from coordcheck.core.errors import CoordCheckError
from coordcheck.core.frame import digest
from coordcheck.setup.init import resolve_init
from coordcheck.setup.optim import OPTIMIZERS, with_mu
from coordcheck.setup.parametrization import (
    PARAMETRIZATIONS,
    Parametrization,
    qualified_name,
    short_name,
)
from coordcheck.report import environments
from coordcheck.run.train import Init, LossFn, OptimizerFactory, cross_entropy, resolve_seeds
from coordcheck.transfer.verdict import DOES_NOT, TRANSFERS, TransferRules, TransferVerdict
from coordcheck.transfer.frame import TransferIdentity, concat_frames
from coordcheck.transfer.report import (
    DepthFit,
    TransferReport,
    build_transfer_report,
    write_transfer_report,
)
from coordcheck.transfer.train import DIVERGE, DataSource, check_data_source, run_cell

__all__ = ["transfer", "TransferResult"]

DATA: dict[str, DataSource] = {"text": data_mod.text_stream}


@dataclass
class TransferResult:
    """What ``transfer`` returns: the loss frame, per-job facts, and the analysis on demand.

    ``.optima`` (optimum log2 lr per parametrization and width), ``.shifts`` (shift per width doubling with
    its interval and status), ``.verdict`` (:class:`coordcheck.transfer.fit.TransferVerdict`), ``.transfers``,
    ``.report()`` (markdown), ``.write(dir)`` (every report file) and ``.plot(path)`` (the paper figure).
    """

    frame: pd.DataFrame
    facts: list[dict] = field(default_factory=list)
    rules: TransferRules = field(default_factory=TransferRules)

    @functools.cached_property
    def _report(self) -> TransferReport:
        report = build_transfer_report(self.frame, rules=self.rules, facts=self.facts)
        report.environment = environments(self.facts)
        return report

    @property
    def _depth_only(self) -> bool:
        return self._report.axes == ["depth"]

    @property
    def optima(self) -> pd.DataFrame:
        """Optima per width (a depth sweep at one width: per depth)."""
        return self._report.depth.optima if self._depth_only else self._report.optima

    @property
    def shifts(self) -> pd.DataFrame:
        """Shifts per width doubling (a depth sweep at one width: per depth doubling)."""
        return self._report.depth.verdict.shifts if self._depth_only else self._report.shifts

    @property
    def verdict(self) -> TransferVerdict:
        """The verdict across width (a depth sweep at one width: across depth; a grid: ``.depth.verdict`` too)."""
        return self._report.depth.verdict if self._depth_only else self._report.verdict

    @property
    def depth(self) -> DepthFit | None:
        """The fit across depth (optima, verdict, deeper-is-not-worse table) when depths were swept."""
        return self._report.depth

    @property
    def status(self) -> str:
        """The worst of the verdicts of the axes swept."""
        return self._report.status

    @property
    def transfers(self) -> bool:
        return self.status == TRANSFERS

    def report(self) -> str:
        """The report as markdown (verdict first)."""
        return self._report.markdown()

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        """In a notebook: the verdict, the shift of the optimum per doubling and the figure (loss against learning
        rate), the rest of the report folded (:func:`coordcheck.report.html.fragment`)."""
        from coordcheck.report.html import notebook_bundle

        status = self.status
        css = {TRANSFERS: "pass", DOES_NOT: "fail"}.get(status, "inconclusive")
        return notebook_bundle(f"coordcheck.transfer: {status.upper()} — {self.verdict.reason}", self.report(),
                               status=css, figure=self._figure_html,
                               open_sections=("Shift of the optimum per width doubling",))

    @functools.cached_property
    def _figure_html(self) -> str:
        """The figure of :meth:`plot` as inline SVG, drawn once."""
        from coordcheck.report.html import drawn, svg_of

        return drawn(lambda: svg_of(self.plot))

    def write(self, out_dir: str | Path, *, figures: bool = True, size: str = "paper") -> Path:
        """Write transfer.md, transfer.json, the tables and the figures into ``out_dir``; return transfer.md."""
        return write_transfer_report(self._report, out_dir, figures=figures, size=size)

    def plot(self, path: str | Path | None = None, *, size: Literal["paper", "slides"] = "paper"):
        """Loss against log2 lr, a line per width, a panel per parametrization (saved as PDF + PNG with ``path``)."""
        from coordcheck.transfer.plot import plot_transfer

        r = self._report
        if self._depth_only:
            return plot_transfer(r.curves, r.depth.optima, path, title=r.depth.verdict.title, size=size, axis="depth")
        return plot_transfer(r.curves, r.optima, path, title=r.verdict.title, size=size)


def _parametrizations(parametrization: object) -> list[Parametrization]:
    items = [parametrization] if isinstance(parametrization, (str, Parametrization)) else list(parametrization)
    out = []
    for p in items:
        if isinstance(p, str):
            if p not in PARAMETRIZATIONS:
                raise CoordCheckError(f"unknown parametrization {p!r}: use one of {sorted(PARAMETRIZATIONS)}")
            p = PARAMETRIZATIONS[p]()
        if not isinstance(p, Parametrization):
            raise CoordCheckError(f"parametrization must be a name or a list of names, got {p!r}")
        out.append(p)
    if not out:
        raise CoordCheckError("parametrization: give at least one (e.g. 'mup', or ['mup', 'sp'])")
    return out


def _lrs(lrs: Sequence[float]) -> list[float]:
    if isinstance(lrs, (int, float, str)) or not len(lrs):
        raise CoordCheckError(f"lrs must be a list of positive learning rates, got {lrs!r}")
    out = []
    for lr in lrs:
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (math.isfinite(lr) and lr > 0):
            raise CoordCheckError(f"lrs must be positive numbers, got {lr!r}")
        out.append(float(lr))
    return sorted(set(out))


def transfer(
    build: Callable[..., nn.Module],
    widths: Sequence[int] | None = None,
    lrs: Sequence[float] | None = None,
    *,
    width: int | None = None,
    depths: Sequence[int] | None = None,
    base_depth: int = 2,
    depth_scaling: str | DepthScaling = "none",
    depth_key: str = "auto",
    parametrization: str | Parametrization | Sequence[str | Parametrization] = "mup",
    optimizer: str | OptimizerFactory = "adam",
    steps: int = 150,
    seeds: int | Sequence[int] = 1,
    data: str | DataSource = "text",
    eval_batches: int = 8,
    base_width: int = 128,
    device: str = "auto",
    precision: str = "fp32",
    loss: LossFn | Literal["model"] | None = None,
    output: int | str | None = None,
    forward_targets: bool | str = False,
    grad_clip: float | None = None,
    diverge: float = DIVERGE,
    progress: bool = True,
    rules: TransferRules | None = None,
    init: str | Init | None = None,
    **build_kwargs: object,
) -> TransferResult:
    """Train ``build(width, **build_kwargs)`` at every (width, lr) for ``steps`` updates on fresh batches.

    ``lrs``: the learning-rate grid (one per octave brackets an optimum well: ``[2.0**k for k in range(-12, -3)]``).
    ``parametrization``: ``"mup"``, ``"sp"``, ``"none"`` or a list of them (``["mup", "sp"]``: muP and its
    control side by side). ``optimizer``: ``"adam"``, ``"adamw"``, ``"sgd"`` or ``factory(model, lr)``.
    ``data``: ``"text"`` (Python's help text, byte-level, the last 10% held out) or a callable
    ``data(split, seed)`` yielding ``(inputs, targets)`` batches, split ``"train"`` or ``"heldout"``; seed ``s``
    draws the training batches of model seed ``s``, held-out batches always use seed 0. ``eval_batches``:
    held-out batches averaged after training. ``device``: ``"auto"`` (CUDA when available), ``"cpu"``,
    ``"cuda"``, ``"cuda:N"``; ``precision``: ``"fp32"``, ``"bf16"`` (autocast) or ``"fp16"`` (and a gradient
    scaler). ``diverge``: a run whose training loss rises above this many times its first
    loss stops and is recorded as diverged. ``loss``, ``output``, ``forward_targets``, ``grad_clip``,
    ``base_width``, ``init``: as in :func:`coordcheck.coord_check`. ``rules``: the verdict's numbers
    (:class:`coordcheck.transfer.fit.TransferRules`).

    Across depth: ``depths=[2, 4, 8]`` with ``width=64`` (or ``widths=[...]``: the grid) sweeps the number of
    residual blocks as :func:`coordcheck.coord_check` does (``base_depth``, ``depth_scaling`` ``"none"`` /
    ``"depth_mup"`` / ``"completep"`` or a :class:`coordcheck.setup.depth.DepthScaling`, ``depth_key``); the result's
    frame has ``depth`` and ``family_id``, and its report the optimum per depth and the verdict across depth.
    """
    from coordcheck.setup.device import check_precision, resolve_device

    widths, depth_list, scaling = sweep_axes(widths, width, depths, depth_scaling)
    if lrs is None:
        raise CoordCheckError("lrs: give the learning-rate grid, e.g. lrs=[2.0**k for k in range(-12, -3)]")
    lrs = _lrs(lrs)
    seeds = resolve_seeds(seeds)
    pars = _parametrizations(parametrization)
    device = str(resolve_device(device))
    precision = check_precision(precision)
    builder = functools.partial(build, **build_kwargs) if build_kwargs else build
    if isinstance(data, str):
        if data not in DATA:
            raise CoordCheckError(f"unknown data {data!r}: use one of {sorted(DATA)} or a callable data(split, seed)")
        data_name, source = data, functools.partial(DATA[data], vocab_size=build_kwargs.get("vocab_size", 256))
    else:
        data_name, source = short_name(qualified_name(data), "coordcheck.setup.data"), check_data_source(data)
    if isinstance(optimizer, str) and optimizer not in OPTIMIZERS:
        raise CoordCheckError(f"unknown optimizer {optimizer!r}: use one of {sorted(OPTIMIZERS)} or a factory")
    if loss is not None and loss != "model" and not callable(loss):
        raise CoordCheckError(f"loss must be a callable loss(output, targets), 'model' or None, got {loss!r}")
    init_fn = resolve_init(init)
    opt_name = (optimizer if isinstance(optimizer, str)
                else short_name(qualified_name(optimizer), "coordcheck.setup.optim"))
    model_name = short_name(qualified_name(build), "coordcheck.setup.models")
    bar = tqdm(total=len(pars) * len(depth_list) * len(widths) * len(lrs) * len(seeds) * steps, desc="μTransfer grid",
               disable=not progress)
    frames, facts = [], []
    try:
        for par in pars:
            factory = with_mu(OPTIMIZERS[optimizer], par.mu_optimizer) if isinstance(optimizer, str) else optimizer
            key = [model_name, repr(sorted(build_kwargs.items())), par.name, opt_name, data_name, steps, seeds,
                   eval_batches, base_width, diverge, output, forward_targets, grad_clip,
                   loss if loss in (None, "model") else qualified_name(loss),
                   *([precision] if precision != "fp32" else []),
                   *(["init", init if isinstance(init, str) else qualified_name(init)] if init_fn else [])]
            if depths is not None or scaling.active:  # keeps earlier ids unchanged
                key += ["depth", base_depth, scaling.name, scaling.alpha, depth_key]
            for d in depth_list:
                depth = Depth(depth=d, base_depth=base_depth, scaling=scaling, key=depth_key)
                identity = TransferIdentity(config_id=digest(key if d is None else [*key, d]), model=model_name,
                                            parametrization=par.name, optimizer=opt_name, data=data_name,
                                            family_id=digest(key), depth=d or 0)
                par.prepare(depth.builder(builder), base_width)
                for w in widths:
                    for lr in lrs:
                        bar.set_postfix(parametrization=par.name, width=w, **({"depth": d} if d else {}),
                                        lr=f"{lr:.3g}")
                        frame, fact = run_cell(
                            builder, w, lr, seeds=seeds, parametrization=par, optimizer=factory, data=source,
                            steps=steps, eval_batches=eval_batches, identity=identity, base_width=base_width,
                            loss_fn=loss or cross_entropy, output=output, forward_targets=forward_targets,
                            grad_clip=grad_clip, diverge=diverge, device=device, precision=precision, progress=bar,
                            prepared=True, init=init_fn, depth=depth)
                        frames.append(frame)
                        facts.append({"parametrization": par.name, **fact})
    finally:
        bar.close()
    return TransferResult(concat_frames(frames), facts, rules or TransferRules())
