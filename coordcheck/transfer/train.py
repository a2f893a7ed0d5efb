"""The learning-rate sweep's engine: train one (width, learning rate) on fresh batches, return its losses.

Stage: train (the μTransfer twin of ``coordcheck.run.train``). Input: a builder, a width, a learning
rate, seeds, a parametrization, an optimizer factory and a data source ``data(split, seed)``
that yields batches. Output: the tidy loss frame of one job (``coordcheck.transfer.frame``
schema) and facts about the run. The Hydra job (``python -m coordcheck.transfer``) and the
Python API (``coordcheck.transfer``) both call :func:`run_cell`.

Each seed builds the model with ``torch.manual_seed(seed)``, trains ``steps`` updates, one fresh
batch per update from ``data("train", seed)``, and then evaluates the mean loss of
``eval_batches`` batches of ``data("heldout", 0)`` — the same held-out batches for every width,
learning rate and seed. A run whose training loss turns non-finite or rises above ``diverge``
times its first loss stops there: it is recorded as *diverged* (its held-out loss is NaN), not
as a crash and not as a loss.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm

from coordcheck.setup.data import Batch, as_batch
from coordcheck.setup.depth import Depth
from coordcheck.setup.device import autocast, environment, grad_scaler
from coordcheck.core.errors import CoordCheckError, check_count
from coordcheck.setup.parametrization import Builder, Parametrization
from coordcheck.record.shapes import n_params, param_shapes
from coordcheck.run.train import Init, LossFn, OptimizerFactory, build_on, cross_entropy, forward_loss, update
from coordcheck.transfer.frame import DIVERGED, OK, TransferIdentity, conform

__all__ = ["DataSource", "run_cell", "train_once", "check_data_source", "DIVERGE"]

log = logging.getLogger("coordcheck")

DataSource = Callable[..., Iterable]  # data(split, seed) -> iterable of Batch or (inputs, targets)
DIVERGE = 2.0  # a training loss above this many times the first one is divergence


def check_data_source(data: object) -> DataSource:
    """A data source must be called as ``data(split, seed)``: say so in one line when it cannot be."""
    if not callable(data):
        raise CoordCheckError(f"data must be a callable data(split, seed) yielding batches, got {type(data).__name__}")
    try:
        inspect.signature(data).bind("train", 0)
    except TypeError:
        raise CoordCheckError("data must accept (split, seed): split is 'train' or 'heldout', seed the run's seed "
                              "(e.g. coordcheck.setup.data.text_stream)") from None
    except ValueError:  # builtins without a signature: let the call decide
        pass
    return data


def _batches(data: DataSource, split: str, seed: int) -> Iterable[Batch]:
    try:
        source = data(split, seed)
        return (as_batch(b, name=getattr(b, "name", "custom")) for b in iter(source))
    except CoordCheckError:
        raise
    except TypeError as e:
        raise CoordCheckError(f"data({split!r}, {seed}) did not give an iterable of batches ({e})") from None


def _next(it, split: str) -> Batch:
    try:
        return next(it)
    except StopIteration:
        raise CoordCheckError(f"data ran out of {split} batches: make it yield at least steps (train) and "
                              f"eval_batches (heldout) batches") from None


def train_once(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: DataSource,
    *,
    seed: int,
    steps: int,
    eval_batches: int,
    loss_fn: LossFn | str = cross_entropy,
    output: int | str | None = None,
    forward_targets: bool | str = False,
    grad_clip: float | None = None,
    diverge: float = DIVERGE,
    on_step: Callable[[], None] | None = None,
    precision: str = "fp32",
    skipped_out: list[int] | None = None,
) -> tuple[list[float], float, int | None]:
    """Train ``steps`` updates on fresh batches; return (train losses, held-out loss, diverged step or None).

    ``precision``: ``fp32``, ``bf16`` (autocast around the forward) or ``fp16`` (and a gradient scaler);
    ``skipped_out`` receives the steps whose update the fp16 scaler skipped."""
    device = next(model.parameters(), torch.empty(0)).device
    scaler = grad_scaler(device, precision)
    call = dict(output=output, forward_targets=forward_targets)
    train = iter(_batches(data, "train", seed))
    losses: list[float] = []
    model.train()
    for step in range(steps):
        batch = _next(train, "train")
        with autocast(device, precision):
            loss = forward_loss(model, batch.inputs.to(device), batch.targets.to(device), loss_fn, **call)
        value = float(loss.detach())
        losses.append(value)
        if on_step is not None:
            on_step()
        if not math.isfinite(value) or value - losses[0] > (diverge - 1) * abs(losses[0]):  # losses may be <= 0
            return losses, math.nan, step
        if not update(model, optimizer, loss, scaler, grad_clip) and skipped_out is not None:
            skipped_out.append(step)
    model.eval()
    heldout_losses = []
    with torch.no_grad(), autocast(device, precision):
        for batch in itertools.islice(iter(_batches(data, "heldout", 0)), eval_batches):
            heldout_losses.append(float(forward_loss(model, batch.inputs.to(device), batch.targets.to(device),
                                                     loss_fn, **call)))
    if len(heldout_losses) < eval_batches:
        raise CoordCheckError(f"data gave {len(heldout_losses)} heldout batches, eval_batches={eval_batches} asked "
                              f"for more: make it yield enough or lower eval_batches")
    heldout = float(np.mean(heldout_losses))
    if not math.isfinite(heldout):
        return losses, math.nan, steps
    return losses, heldout, None


def run_cell(
    build: Builder,
    width: int,
    lr: float,
    *,
    seeds: Sequence[int],
    parametrization: Parametrization,
    optimizer: OptimizerFactory,
    data: DataSource,
    steps: int,
    eval_batches: int,
    identity: TransferIdentity,
    base_width: int,
    loss_fn: LossFn | str = cross_entropy,
    output: int | str | None = None,
    forward_targets: bool | str = False,
    grad_clip: float | None = None,
    diverge: float = DIVERGE,
    device: torch.device | str = "cpu",
    precision: str = "fp32",
    progress: bool | tqdm = True,
    prepared: bool = False,
    init: Init | None = None,
    depth: Depth | None = None,
) -> tuple[pd.DataFrame, dict]:
    """Train every seed at one (width, lr); return the job's loss frame and facts about it.

    ``prepared``: ``parametrization.prepare`` already ran for this builder (the API prepares once per grid);
    ``init``: re-initialises the built model (:mod:`coordcheck.setup.init`; None: as built); ``depth``: the job's depth,
    ``base_depth`` and depth scaling (:class:`coordcheck.setup.depth.Depth`; None: the model's own, unscaled), applied
    as
    the coordinate check applies it (``coordcheck.run.train.build_on``).
    """
    check_count(steps, "steps")
    check_count(eval_batches, "eval_batches")
    if not (isinstance(lr, (int, float)) and not isinstance(lr, bool) and math.isfinite(lr) and lr > 0):
        raise CoordCheckError(f"lr must be a positive number, got {lr!r}")
    if not diverge > 1:
        raise CoordCheckError(f"diverge must be a number > 1 (a multiple of the first loss), got {diverge!r}")
    t0 = time.perf_counter()
    depth = depth or Depth()
    if not prepared:
        parametrization.prepare(depth.builder(build), base_width)
    bar = progress if isinstance(progress, tqdm) else tqdm(
        total=len(seeds) * steps, desc=f"width {width} lr {lr:g}", disable=not progress, leave=False)
    rows, facts = [], {"config_id": identity.config_id, "width": width, "lr": lr, "seeds": list(seeds),
                       "diverged": [], **depth.facts(), **environment(torch.device(device), precision)}
    try:
        for seed in seeds:
            model, opt = build_on(device, build, width, seed, parametrization, base_width, optimizer, lr, init,
                                  depth)
            facts["shapes"] = param_shapes(model)  # the evidence that the builder uses width (coordcheck.record.shapes)
            facts["n_params"] = n_params(facts["shapes"])
            losses, heldout, diverged = train_once(
                model, opt, data, seed=seed, steps=steps, eval_batches=eval_batches, loss_fn=loss_fn, output=output,
                forward_targets=forward_targets, grad_clip=grad_clip, diverge=diverge, on_step=lambda: bar.update(1),
                precision=precision, skipped_out=(skipped := []))
            if skipped:
                facts.setdefault("fp16_skipped_updates", []).append({"seed": seed, "steps": skipped})
            if diverged is not None:
                bar.update(steps - len(losses))
                facts["diverged"].append({"seed": seed, "step": diverged})
                log.info("width %d lr %g seed %d diverged at step %d", width, lr, seed, diverged)
            status = OK if diverged is None else DIVERGED
            rows.append(pd.DataFrame({"seed": seed, "step": np.arange(len(losses)), "split": "train",
                                      "loss": losses, "status": status}))
            rows.append(pd.DataFrame({"seed": [seed], "step": [steps], "split": ["heldout"], "loss": [heldout],
                                      "status": [status]}))
    finally:
        if bar is not progress:
            bar.close()
    frame = pd.concat(rows, ignore_index=True)
    for col, val in {**identity.__dict__, "width": width, "lr": float(lr)}.items():
        frame[col] = val
    facts["seconds"] = round(time.perf_counter() - t0, 3)
    return conform(frame), facts
