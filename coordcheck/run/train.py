"""The engine: train one width for a few steps with probes attached, return a tidy frame.

Stage: train. Input: a builder, a width, seeds, a parametrization, an optimizer factory, a
fixed batch and a loss. Output: the tidy frame of one job (``coordcheck.core.frame`` schema) and
a small dict of facts about the run (parameter count, seconds, divergence). The CLI (one
Hydra job per width) and the Python API (``coord_check``) both call :func:`run_width`.

The loop: for ``step`` in 0..steps, forward the fixed batch with probes recording (step 0 is
the forward at initialisation, before any update; mup calls it t=1), then — unless it is
the last step or the loss is not finite — backward and one optimizer step. A non-finite
loss ends that seed's training: the frame keeps the non-finite values of that step and
the run's facts say where it diverged.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from coordcheck.setup.data import Batch
from coordcheck.setup.depth import Depth
from coordcheck.setup.parallel import Parallel, ensure_group, launch_command
from coordcheck.setup.device import autocast, environment, grad_scaler
from coordcheck.core.errors import CoordCheckError, check_count
from coordcheck.core.frame import COLUMNS, DEFAULT_TENSORS, LOSS_MODULE, ROOT_MODULE, STATS, conform
from coordcheck.setup.parametrization import Builder, Parametrization, build_model, named_keywords
from coordcheck.record import capture as capture_module
from coordcheck.record import probes as probes_module
from coordcheck.record.load import LOAD_STATS, LOAD_TENSOR
from coordcheck.record.ranks import world
from coordcheck.record.moments import stats_from_moments
from coordcheck.core.errors import resolve_seeds  # noqa: F401  (re-exported: its home was here)
from coordcheck.record.outputs import is_bare_loss
from coordcheck.record.probes import Probes, StepRecord, first_tensor, select_output
from coordcheck.record.shapes import n_params, param_shapes, tied_names
from coordcheck.record.eps import EPS_TENSOR, EpsProbe, eps_frame
from coordcheck.record.param_facts import param_facts
from coordcheck.record.weights import WeightFacts, measured_steps

__all__ = ["RunIdentity", "cross_entropy", "forward_loss", "train_with_probes", "to_frame", "run_width",
           "resolve_seeds"]

log = logging.getLogger(__name__)

LossFn = Callable[[object, torch.Tensor], torch.Tensor]
OptimizerFactory = Callable[[nn.Module, float], torch.optim.Optimizer]
Init = Callable[..., None]  # init(model, **the context its signature names): coordcheck.setup.init


@dataclass(frozen=True)
class RunIdentity:
    """The identity columns of a frame: what was run, apart from width and seed. ``depth``: the depth the job set
    (0: the model's own); ``experts``: the number of experts the job set (0: the model's own); ``family_id``: the
    configuration minus its depth and number of experts (empty: ``config_id``)."""

    config_id: str
    model: str
    parametrization: str
    optimizer: str
    lr: float
    data: str
    data_policy: str = "fixed"
    depth: int = 0
    family_id: str = ""
    experts: int = 0

    def columns(self, **more: object) -> dict[str, object]:
        """The frame's constant columns of this identity, with ``more`` (``width``, ``seed``)."""
        return {**self.__dict__, "family_id": self.family_id or self.config_id, **more}


def cross_entropy(output: object, targets: torch.Tensor) -> torch.Tensor:
    """Default loss: cross-entropy over the last dimension (LM logits (B, T, V) or (B, C))."""
    if is_bare_loss(output):
        raise CoordCheckError("the model returned one number (its own loss?), not logits: set loss=model to train on "
                              "it, or call the model without its targets (forward_targets=false)")
    logits = first_tensor(output)
    if logits is None:
        raise CoordCheckError("the model returned no floating-point tensor: pass loss= for this model")
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def model_loss(output: object) -> torch.Tensor:
    """``loss="model"``: the loss the model returned — the output itself when it is one number (a bare scalar loss, as
    nanochat's ``forward(idx, targets)`` returns), a ``loss`` key or attribute, else the last scalar in a tuple."""
    if is_bare_loss(output):
        loss = output
    elif isinstance(output, Mapping) and "loss" in output:
        loss = output["loss"]
    elif isinstance(getattr(output, "loss", None), torch.Tensor):
        loss = output.loss
    elif isinstance(output, (tuple, list)):
        loss = next((t for t in reversed(output) if isinstance(t, torch.Tensor) and t.ndim == 0), None)
    else:
        loss = None
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise CoordCheckError("loss=model, but the model returned no scalar loss: pass the targets to the model "
                              "(forward_targets=true) or leave loss unset for cross-entropy")
    return loss.reshape(())


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_DISPATCH_FILES = (probes_module.__file__, capture_module.__file__, torch.overrides.__file__)


def _blame(model: nn.Module, e: BaseException) -> tuple[nn.Module | None, str | None, bool]:
    """The innermost module whose ``forward`` was running when ``e`` was raised, its name, and whether
    the raising frame is torch's own code (a shape check in a layer) rather than the model's."""
    names = {id(m): n or ROOT_MODULE for n, m in model.named_modules()}
    module = name = None
    tb, last = e.__traceback__, ""
    while tb is not None:
        frame = tb.tb_frame
        obj = frame.f_locals.get("self")
        if frame.f_code.co_name == "forward" and id(obj) in names:
            module, name = obj, names[id(obj)]
        if frame.f_code.co_filename not in _DISPATCH_FILES:  # the function probe's calls on the model's behalf
            last = frame.f_code.co_filename
        tb = tb.tb_next
    return module, name, str(Path(last).resolve()).startswith(_TORCH_DIR)


def call_model(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor,
               forward_targets: bool | str = False) -> object:
    """``model(inputs)``; with ``forward_targets`` also the targets, positionally (True) or by that keyword."""
    if forward_targets is True:
        return model(inputs, targets)
    if isinstance(forward_targets, str) and forward_targets:
        return model(inputs, **{forward_targets: targets})
    return model(inputs)


def forward_loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, loss_fn: LossFn | str, *,
                 output: int | str | None = None, forward_targets: bool | str = False,
                 probes: Probes | None = None) -> torch.Tensor:
    """The loss of one forward, with errors blamed on the right party (one line each).

    ``loss_fn(select_output(model(inputs), output), targets)``, or the model's own loss for
    ``loss_fn="model"``. An exception from the model's own code is a model error naming the
    module; "data does not fit" is kept for torch rejecting the batch in the first layer
    (nothing ran before it: ``probes.leaves_done == 0`` when probes are given).
    """
    try:
        out = call_model(model, inputs, targets, forward_targets)
    except CoordCheckError:
        raise
    except torch.OutOfMemoryError as e:  # the device's memory, not the model's code
        raise CoordCheckError(f"out of memory in the forward ({_first_line(e)}): check fewer or smaller widths, a "
                              f"smaller data.batch_size or precision=bf16") from None
    except Exception as e:
        if "find_unused_parameters" in str(e):  # DDP's reducer, not the model's code
            raise CoordCheckError("DDP: some parameters took no part in the last step's loss (a routed expert that "
                                  "got no tokens on some process?): parallel.find_unused_parameters=true (Python: "
                                  "parallel=lambda m: DistributedDataParallel(m, find_unused_parameters=True))"
                                  ) from None
        module, name, in_torch = _blame(model, e)
        if module is None:
            how = "model(inputs, targets)" if forward_targets else "model(inputs)"
            raise CoordCheckError(f"the model could not be called as {how} ({_first_line(e)}): check "
                                  f"forward_targets and data.*") from None
        first_layer = next(module.children(), None) is None and (probes is None or probes.leaves_done == 0)
        if in_torch and first_layer:
            raise CoordCheckError(f"data does not fit the model ({_first_line(e)} in {name}): check data.* against "
                                  f"model.*") from None
        raise CoordCheckError(f"the model raised an error in {name} ({_first_line(e)}): it comes from the model's "
                              f"own code — fix the model or its configuration") from None
    try:
        if loss_fn == "model":
            return model_loss(out)
        return loss_fn(select_output(out, output), targets)
    except CoordCheckError:
        raise
    except Exception as e:
        raise CoordCheckError(f"the loss could not be computed from the model's output ({_first_line(e)}): check "
                              f"output=, loss= and the data's targets") from None


def update(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
           scaler: torch.amp.GradScaler | None = None, grad_clip: float | None = None) -> bool:
    """One update from ``loss``: zero the gradients, backward, clip the global norm to ``grad_clip``, step —
    through the fp16 ``scaler`` when given. False when the scaler skipped the update (inf/NaN gradients)."""
    optimizer.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        return True
    scaler.scale(loss).backward()
    if grad_clip:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() >= scale  # the scaler backs off after a skipped update


def build_on(device: torch.device | str, build: Builder, width: int, seed: int, parametrization: Parametrization,
             base_width: int, optimizer: OptimizerFactory, lr: float,
             init: Init | None = None, depth: Depth | None = None,
             shard: Callable[[nn.Module], nn.Module] | None = None) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The seeded, parametrized model built directly on ``device``, re-initialised by ``init``
    (:mod:`coordcheck.setup.init`), and its optimizer (checked). ``init`` and the optimizer factory also get those of
    ``build``, ``width``, ``base_width`` (and, for ``init``, ``seed``, ``parametrization``; for the factory
    ``depth``, ``base_depth``, ``depth_alpha``) that their signatures name (``coordcheck.setup.optim.mup_groups``,
    ``coordcheck.setup.init.mup_init``). ``depth``: the job's depth and its scaling (:mod:`coordcheck.setup.depth`): the
    builder gets its depth keywords, and under ``mup``/``sp`` the optimizer's depth factors are applied."""
    depth = depth or Depth()
    build = depth.builder(build)  # the builder with the job's depth keywords bound (the base shapes' too)
    context = dict(build=build, width=width, base_width=base_width)
    with torch.device(device):
        model = build_model(build, width, seed, parametrization, base_width)
        if init is not None:
            init(model, **named_keywords(init, **context, seed=seed, parametrization=parametrization))
    if shard is not None:  # FSDP2: the optimizer over the sharded parameters (coordcheck.setup.parallel)
        model = shard(model)
    opt = optimizer(model, lr, **named_keywords(optimizer, **context, **depth.factory_keywords(model)))
    if not isinstance(opt, torch.optim.Optimizer):
        raise CoordCheckError(f"the optimizer factory returned {type(opt).__name__}, not a torch Optimizer")
    if parametrization.name != "none":  # muP by hand: the factory applies its own depth factors
        depth.scale(opt, model)
    return model, opt


def train_with_probes(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    *,
    steps: int,
    loss_fn: LossFn | str = cross_entropy,
    tensors: Sequence[str] = DEFAULT_TENSORS,
    stats: Sequence[str] = STATS,
    on_step: Callable[[StepRecord], None] | None = None,
    output: int | str | None = None,
    forward_targets: bool | str = False,
    grad_clip: float | None = None,
    precision: str = "fp32",
    skipped_out: list[int] | None = None,
    eps: EpsProbe | None = None,
    pool_experts: bool = True,
    trained: nn.Module | None = None,
    weights: WeightFacts | None = None,
) -> tuple[list[StepRecord], dict[str, tuple[int, str, int]]]:
    """Train ``steps`` updates on the fixed batch; return the per-step records and the layout.

    ``loss_fn``: ``loss(output, targets)`` or ``"model"`` (the loss the model returns);
    ``output``: index or key of the logits in a tuple / dict output; ``forward_targets``:
    pass the targets to ``forward`` (True: positionally, a string: by that keyword);
    ``grad_clip``: clip the global gradient norm to this before each update; ``precision``:
    ``fp32``, ``bf16`` (autocast around the forward) or ``fp16`` (autocast and a gradient scaler);
    ``skipped_out`` receives the steps after which the fp16 scaler skipped the update; ``eps``
    (:class:`coordcheck.record.eps.EpsProbe`) records Adam's ε fraction after each update; ``pool_experts``: an expert
    list's members recorded as one module per layer (:mod:`coordcheck.record.load`); ``trained``: the module the
    forward runs through when it is not ``model`` itself (a DDP wrapper around it: the probes hook ``model``, whose
    names are the model's own); ``weights`` (:class:`coordcheck.record.weights.WeightFacts`) measures the weights,
    their updates and the modules' gains at its steps.
    """
    check_count(steps, "steps")
    device = next(model.parameters(), torch.empty(0)).device
    inputs, targets = batch.inputs.to(device), batch.targets.to(device)  # moved once
    scaler = grad_scaler(device, precision)
    skipped: list[int] = []
    trained = model if trained is None else trained
    trained.train()
    records: list[StepRecord] = []
    with Probes(model, tensors=tensors, stats=stats, output=output, pool_experts=pool_experts,
                batch_shape=tuple(inputs.shape)) as probes:
        if weights is not None:
            weights.start()
        for step in range(steps + 1):
            probes.begin_step(step)
            if weights is not None:
                weights.gains.begin(step, weights.measuring_forward(step))
            with autocast(device, precision):
                loss = forward_loss(trained, inputs, targets, loss_fn, output=output,
                                    forward_targets=forward_targets, probes=probes)
            if weights is not None:
                weights.gains.end()
                weights.expect(step + 1)
            rec = probes.end_step(loss)
            records.append(rec)
            if on_step is not None:
                on_step(rec)
            if step == steps or not math.isfinite(rec.loss):
                break
            if not update(model, optimizer, loss, scaler, grad_clip):
                skipped.append(step)
            elif eps:
                eps.record(step + 1)  # the state after update step + 1, which the next forward sees
        layout = dict(probes.layout)
    if skipped:
        log.warning("fp16: the gradient scaler skipped the update after step(s) %s (inf/NaN gradients): the next "
                    "steps' delta shows no update there", skipped)
    if skipped_out is not None:
        skipped_out.extend(skipped)
    return records, layout


def to_frame(
    records: Sequence[StepRecord],
    layout: dict[str, tuple[int, str, int]],
    identity: RunIdentity,
    *,
    width: int,
    seed: int,
    stats: Sequence[str] = STATS,
) -> pd.DataFrame:
    """Records of one (width, seed) -> tidy frame: one row per (step, module, tensor, stat)."""
    k = len(stats)
    cols: dict[str, list] = {c: [] for c in ("step", "module", "layer_index", "role", "call_order", "head_dim",
                                             "tensor", "stat", "value")}
    for rec in records:  # the columns built as lists and framed once (a frame per step cost ~1 ms each)
        lay = [layout[m] for m, _ in rec.keys]
        for col, per_key in (("module", [m for m, _ in rec.keys]), ("layer_index", [la[0] for la in lay]),
                             ("role", [la[1] for la in lay]), ("call_order", [la[2] for la in lay]),
                             ("head_dim", [rec.head_dims.get(m, 0) for m, _ in rec.keys]),
                             ("tensor", [t for _, t in rec.keys])):
            cols[col] += [v for v in per_key for _ in range(k)]
        cols["stat"] += list(stats) * len(rec.keys)
        if rec.keys:
            cols["value"] += stats_from_moments(rec.moments, stats).reshape(-1).tolist()  # (R, k) row-major
        for name, values in rec.loads.items():  # a router's load (record.load): its own two statistics
            la = layout[name]
            for col, v in (("module", name), ("layer_index", la[0]), ("role", la[1]), ("call_order", la[2]),
                           ("head_dim", 0), ("tensor", LOAD_TENSOR)):
                cols[col] += [v] * len(LOAD_STATS)
            cols["stat"] += list(LOAD_STATS)
            cols["value"] += list(values)
        cols["step"] += [rec.step] * (len(rec.keys) * k + len(rec.loads) * len(LOAD_STATS) + 1)
        for col, loss_value in (("module", LOSS_MODULE), ("layer_index", -1), ("role", "loss"), ("call_order", -1),
                                ("head_dim", 0), ("tensor", "loss"), ("stat", "value"), ("value", rec.loss)):
            cols[col].append(loss_value)
    constant = identity.columns(width=width, seed=seed)
    return conform(pd.DataFrame({c: cols[c] if c in cols else constant[c] for c in COLUMNS}))


def run_width(
    build: Builder,
    width: int,
    *,
    seeds: Sequence[int],
    parametrization: Parametrization,
    optimizer: OptimizerFactory,
    lr: float,
    batch: Batch,
    steps: int,
    identity: RunIdentity,
    base_width: int,
    loss_fn: LossFn | str = cross_entropy,
    tensors: Sequence[str] = DEFAULT_TENSORS,
    stats: Sequence[str] = STATS,
    progress: bool | tqdm = True,
    output: int | str | None = None,
    forward_targets: bool | str = False,
    grad_clip: float | None = None,
    device: torch.device | str = "cpu",
    precision: str = "fp32",
    init: Init | None = None,
    depth: Depth | None = None,
    pool_experts: bool = True,
    parallel: Parallel | None = None,
) -> tuple[pd.DataFrame, dict]:
    """Train every seed at one width; return the job's tidy frame and facts about the run.

    ``device``: where the model is built (directly, under a ``torch.device`` context) and trained;
    ``precision``: ``fp32`` / ``bf16`` / ``fp16`` (see :mod:`coordcheck.setup.device`); ``init``: re-initialises the
    built model (:mod:`coordcheck.setup.init`; None: as built); ``depth``: the job's depth, ``base_depth`` and depth
    scaling (:class:`coordcheck.setup.depth.Depth`; None: the model's own, unscaled)."""
    if grad_clip is not None and (isinstance(grad_clip, bool) or not grad_clip > 0):
        raise CoordCheckError(
            f"grad_clip must be a positive number (a global gradient norm) or null, got {grad_clip!r}")
    t0 = time.perf_counter()
    depth = depth or Depth()
    parametrization.prepare(depth.builder(build), base_width)
    bar = progress if isinstance(progress, tqdm) else tqdm(
        total=len(seeds) * (steps + 1), desc=f"width {width}", disable=not progress, leave=False
    )
    parallel = parallel or Parallel()
    device = parallel.device(torch.device(device))
    ensure_group(parallel, device)
    batch = parallel.shard(batch)  # this process's share (all of it in one process)
    frames, facts = [], {"config_id": identity.config_id, "width": width, "seeds": list(seeds), "diverged": [],
                         **depth.facts(), **environment(device, precision)}
    if parallel.active:
        facts["parallel"] = {"name": parallel.name, "processes": world()[1], "launch": launch_command()}
    try:
        for seed in seeds:
            model, opt = build_on(device, build, width, seed, parametrization, base_width, optimizer, lr, init, depth,
                                  shard=parallel.shard_model if parallel.shards else None)
            facts["shapes"] = param_shapes(model)  # the evidence that the builder uses width (coordcheck.record.shapes)
            facts["n_params"] = n_params(facts["shapes"])
            facts["tied"] = tied_names(model)  # a readout that shares the embedding's weight (judge.facts)
            if "audit" not in facts:  # the labels beside judge.facts, from the first seed (setdefault: every seed)
                facts["audit"] = param_facts(model, opt, parametrization.name)
            if parametrization.structure:  # what does not fit the parametrization (judge.structure.structure_causes)
                facts["structure"] = parametrization.structure
            eps = EpsProbe(model, opt) if EPS_TENSOR in tensors else None
            check_count(steps, "steps")  # (before the weights' probes count the steps: one line, not a TypeError)
            weights = WeightFacts(model, [opt], measured_steps(range(steps + 1)), batch_shape=tuple(batch.inputs.shape))
            records, layout = train_with_probes(
                model, opt, batch, steps=steps, loss_fn=loss_fn, tensors=tensors, stats=stats,
                on_step=lambda rec: bar.update(1), output=output, forward_targets=forward_targets, grad_clip=grad_clip,
                precision=precision, skipped_out=(skipped := []), eps=eps, pool_experts=pool_experts,
                trained=parallel.wrap(model), weights=weights,
            )
            weights.remove()
            facts.setdefault("modules", records[0].modules)  # each recorded module's op (coordcheck.judge.roles)
            if records[0].notes and "routing_notes" not in facts:  # routers whose choice was not counted: said once
                facts["routing_notes"] = dict(records[0].notes)
                for module, why in records[0].notes.items():
                    log.warning("routing load not recorded for %s: %s", module, why)
            if skipped:
                facts.setdefault("fp16_skipped_updates", []).append({"seed": seed, "after_steps": skipped})
            last = records[-1]
            if not math.isfinite(last.loss):
                facts["diverged"].append({"seed": seed, "step": last.step, "loss": repr(last.loss)})
                log.warning("width %d seed %d diverged at step %d (loss %s)", width, seed, last.step, last.loss)
            frames.append(to_frame(records, layout, identity, width=width, seed=seed, stats=stats))
            if eps:
                frames.append(eps_frame(eps, layout, identity.columns(width=width, seed=seed)))
            frames.append(weights.frame(layout, identity.columns(width=width, seed=seed)))
    finally:
        if bar is not progress:
            bar.close()
    facts["seconds"] = round(time.perf_counter() - t0, 3)
    return pd.concat(frames, ignore_index=True), facts
