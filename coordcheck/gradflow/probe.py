"""Gradient-flow probe: are gradients reaching every layer at the right scale? One step, or a watchdog.

Stage: measure (the gradient-flow diagnostic; its diagnoses, report and figure live in
:mod:`coordcheck.gradflow.checks`, :mod:`~coordcheck.gradflow.report` and
:mod:`~coordcheck.gradflow.plot`, which never import torch). Input: an ``nn.Module`` and,
optionally, its optimizer and GradScaler inside a training loop — or one batch
(:func:`gradflow_once`). Output: a tidy frame, one row per (probe step, parameter or module,
statistic); schema in :mod:`coordcheck.gradflow.schema`. Activation moments and layout come from
:mod:`coordcheck.record.moments` and :mod:`coordcheck.record.layout`, as for the coordinate check's probes.

In a training loop::

    probe = GradFlowProbe(model, optimizer, every=100)   # before the first forward
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        loss.backward()
        probe.step(step, loss=loss)   # after backward, before optimizer.step() / zero_grad()
        optimizer.step()
        optimizer.zero_grad()
    probe.remove()
    print(*(d.line() for d in diagnose(probe.frame)), sep="\\n")

What a probe step records, and how it stays cheap:

* **Which forward.** Every K-th ``step()`` call is a probe step (calls 0, K, 2K, ...). Its
  activations come from the **last forward of the root module before that call** (with
  gradient accumulation: the last micro-batch). The forward hooks do work only while the root
  module's forward runs *and* the next ``step()`` call is a probe step; otherwise each costs
  one attribute check. Hooks that fire outside the root forward — activation-checkpoint
  recomputation during backward — record nothing, so nothing is counted twice.
* **Gradients** are read at ``step()``: per parameter, ‖g‖₂ and ‖p‖₂ by ``torch._foreach_norm``
  in float32 on the device; activation moments are reduced on the device inside the hooks.
  Everything is stacked into one tensor and moved to the host **once per probe step**; a second,
  small transfer happens only when some gradient is non-finite, to count its NaN/inf entries.
* **AMP**: with ``scaler=`` (a ``torch.amp.GradScaler``), norms are divided by the scale when
  the gradients are still scaled (no ``unscale_`` yet for ``optimizer``); the gradients
  themselves are never touched. Call ``step()`` before ``scaler.step()`` / ``scaler.update()``.
* **Backward order and stale gradients.** A tensor hook on each trainable parameter (it runs
  before the gradient is accumulated, and only reads) records the order in which gradients
  arrive (``backward_order``: 0 = closest to the loss) and whether the ``.grad`` about to be
  accumulated into is the very tensor left by the previous step, unmodified since the previous
  ``step()`` call or ``optimizer.step()`` — i.e. nobody zeroed it (``stale``). ``zero_grad()``
  with ``set_to_none`` true or false both count as zeroing. Call ``step()`` once per optimizer
  step.
* **No effect on training.** Hooks only read (no in-place op, no RNG, outputs untouched); the
  parameters after training are bit-identical with and without a probe.
* **torch.compile**: pass the compiled model; the probe measures its eager module
  (``_orig_mod``, the same parameters). Forward hooks added after compilation do not fire in
  compiled forwards, so activation rows come only from eager forwards (``gradflow_once`` runs
  the eager module); gradients are read either way.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import numpy as np
import pandas as pd
import torch
from torch import nn

from coordcheck.setup.data import Batch, as_batch
from coordcheck.core.errors import CoordCheckError, check_count
from coordcheck.core.frame import ROOT_MODULE
from coordcheck.gradflow.schema import ACTIVATION_STATS, COLUMNS, GLOBAL_NAME, UNUSED
from coordcheck.record.layout import infer_layout
from coordcheck.record.moments import N, moment_rows, moments, needed_moments, pool_calls, stats_from_moments
from coordcheck.record.outputs import is_bare_loss
from coordcheck.record.probes import first_tensor
from coordcheck.run.train import LossFn, cross_entropy, forward_loss

__all__ = ["GradFlowProbe", "gradflow_once", "probe_training", "SATURATING"]

# Saturation tests on the outputs of these module types (functional F.tanh / torch.sigmoid
# calls inside a forward are not modules and are not seen).
SATURATING: dict[type[nn.Module], Callable[[torch.Tensor], torch.Tensor]] = {
    nn.Tanh: lambda y: y.abs() > 0.99,
    nn.Sigmoid: lambda y: (y - 0.5).abs() > 0.49,  # outside [0.01, 0.99]
}
# The activation statistics taken from moments (the others are counts) and the device moments they
# need; per call of a module these are reduced on the device, followed by its exact zeros and
# saturated entries.
MOMENT_STATS = ("mean", "std", "absmax")
DEVICE_MOMENTS = needed_moments(MOMENT_STATS)


def _eager(model: nn.Module) -> nn.Module:
    return getattr(model, "_orig_mod", model)  # torch.compile's OptimizedModule wraps the eager module


class GradFlowProbe:
    """Gradient and activation statistics every ``every``-th :meth:`step` call; see the module docstring.

    ``labels`` fill the frame's identity columns (default ``model`` = the class name,
    ``parametrization`` = ``none``, ``width`` = -1); extra keys become extra columns.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None, *, every: int = 1,
                 scaler: torch.amp.GradScaler | None = None, labels: Mapping[str, object] | None = None):
        check_count(every, "every")
        self.model = _eager(model)
        self.optimizer = optimizer
        self.every = every
        self.scaler = scaler
        self.labels = {"model": type(self.model).__name__, "parametrization": "none", "width": -1, **(labels or {})}
        self._params = list(self.model.named_parameters())
        self._calls = 0  # step() calls so far
        self._armed = True  # the next step() call is a probe step: record the forward before it
        self._recording = False  # inside the root forward of an armed cycle
        self._frames: list[pd.DataFrame] = []
        self._layout: dict[str, tuple[int, str, int]] = {}
        self._layout_key: tuple[str, ...] = ()
        self._snap: dict[int, tuple[weakref.ref, int]] | None = None  # grads at the previous boundary
        self._reset_forward()
        self._order: dict[int, int] = {}
        self._stale: set[int] = set()
        self._handles: list = []
        modules = dict(self.model.named_modules())
        for name, module in modules.items():
            sat = next((f for t, f in SATURATING.items() if isinstance(module, t)), None)
            self._handles.append(module.register_forward_hook(
                partial(self._on_output, name or ROOT_MODULE, sat, next(module.children(), None) is not None)))
        self._handles.append(self.model.register_forward_pre_hook(self._on_forward_start))
        self._handles.append(self.model.register_forward_hook(self._on_forward_end, always_call=True))
        for i, (_, p) in enumerate(self._params):
            if p.requires_grad:
                self._handles.append(p.register_hook(partial(self._on_grad, i)))
        if optimizer is not None:
            self._handles.append(optimizer.register_step_post_hook(self._on_optimizer_step))

    # -- hooks (read only) ----------------------------------------------------------
    def _reset_forward(self) -> None:
        self._keys: list[str] = []
        self._n: list[int] = []
        self._vals: list[torch.Tensor] = []
        self._fired: dict[str, None] = {}  # first-fire order, as coordcheck.record.probes records it
        self._last_out: object = None

    def _on_forward_start(self, module: nn.Module, inputs: object) -> None:
        if self._armed and torch._C._current_graph_task_id() == -1:  # not a recomputation inside backward
            self._reset_forward()
            self._order = {}
            self._recording = True

    def _on_forward_end(self, module: nn.Module, inputs: object, output: object) -> None:
        self._recording = False

    def _on_output(self, name: str, sat: Callable | None, container: bool, module: nn.Module, inputs: object,
                   output: object) -> None:
        if not self._recording or (name == ROOT_MODULE and is_bare_loss(output)):
            return  # a model returning its loss alone (nanochat's model(x, y)): not an activation
        x = first_tensor(output)
        if x is None or x.numel() == 0:
            return
        self._fired.setdefault(name)
        if container and x is self._last_out:
            return  # a container returning its last submodule's output: not recorded twice
        self._last_out = x
        with torch.no_grad():
            x = x.detach()
            zeros = x.numel() - torch.count_nonzero(x)
            counts = torch.stack([zeros, sat(x).sum() if sat else zeros]).float()
            self._vals.append(torch.cat([moments(x, DEVICE_MOMENTS), counts]))  # DEVICE_MOMENTS, zeros, saturated
        self._keys.append(name)
        self._n.append(x.numel())

    def _on_grad(self, i: int, grad: torch.Tensor) -> None:
        if not self._armed:
            return
        self._order.setdefault(i, len(self._order))
        snap = self._snap.pop(i, None) if self._snap is not None else None
        if snap is not None:
            g = self._params[i][1].grad  # before accumulation: what this gradient is added to
            if g is not None and snap[0]() is g and g._version == snap[1]:
                self._stale.add(i)

    def _on_optimizer_step(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        if self._armed:
            self._snapshot()  # after the step: in-place changes (unscale_, clipping) are not "zeroing"

    def _snapshot(self) -> None:
        self._snap = {i: (weakref.ref(p.grad), p.grad._version) for i, (_, p) in enumerate(self._params)
                      if p.grad is not None}

    # -- the loop's side ------------------------------------------------------------
    def step(self, step: int | None = None, *, loss: torch.Tensor | None = None) -> pd.DataFrame | None:
        """Call after ``loss.backward()``, before ``optimizer.step()``/``zero_grad()``, every iteration.

        Every ``every``-th call (0, K, 2K, ...) is a probe step: returns its rows (also appended to
        :attr:`frame`); other calls return None at the cost of a counter. ``step`` labels the rows
        (default: the number of calls so far); ``loss`` adds ``loss`` rows.
        """
        n = self._calls
        self._calls += 1
        rows = None
        if n % self.every == 0:
            rows = self._measure(n if step is None else int(step), loss)
            self._frames.append(rows)
        self._armed = (n + 1) % self.every == 0
        self._stale = set()
        self._snap = None
        if self._armed:
            self._snapshot()
        return rows

    @property
    def frame(self) -> pd.DataFrame:
        """Every recorded row, in the schema of :mod:`coordcheck.gradflow.schema`."""
        if not self._frames:
            return pd.DataFrame({c: pd.Series(dtype=t) for c, t in COLUMNS.items()})
        return pd.concat(self._frames, ignore_index=True)

    def remove(self) -> None:
        """Remove every hook (forward, gradient, optimizer); the recorded frame stays (as ``Probes.remove``)."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._reset_forward()
        self._snap = None

    detach = remove  # the old name, kept for old scripts

    def __enter__(self) -> GradFlowProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # -- one probe step ---------------------------------------------------------------
    def _measure(self, step: int, loss: torch.Tensor | None) -> pd.DataFrame:
        params = [p for _, p in self._params]
        device = params[0].device if params else torch.device("cpu")
        have = [i for i, p in enumerate(params) if p.grad is not None]
        scale, divide = self._scale()
        with torch.no_grad():
            parts = [
                _norms([_dense(params[i].grad) for i in have], device),
                _norms([p.detach() for p in params], device),
                torch.stack(self._vals).reshape(-1).to(device) if self._vals else torch.zeros(0, device=device),
                _scalar(scale, device),
                _scalar(None if loss is None else loss.detach(), device),
            ]
            host = torch.cat(parts).cpu().double().numpy()  # the one device-to-host transfer of the probe step
        width = len(DEVICE_MOMENTS) + 2  # per call: the moments, zeros, saturated
        n_have, n_par, n_act = len(have), len(params), len(self._vals) * width
        gnorm = np.full(n_par, np.nan)
        gnorm[have] = host[:n_have]
        pnorm = host[n_have:n_have + n_par]
        acts = host[n_have + n_par:n_have + n_par + n_act].reshape(-1, width)
        loss_scale, loss_value = host[-2], host[-1]
        if divide:
            gnorm = gnorm / loss_scale
        nonfinite = np.where([p.grad is None for p in params], np.nan, 0.0)
        bad = [i for i in have if not np.isfinite(gnorm[i])]
        if bad:  # rare: a second transfer to count the NaN/inf entries
            with torch.no_grad():
                counts = torch.stack([(~torch.isfinite(_dense(params[i].grad))).sum().to(device) for i in bad])
            nonfinite[bad] = counts.cpu().numpy()
        layout = self._current_layout()
        rows = self._param_rows(gnorm, pnorm, nonfinite, layout)
        rows += self._activation_rows(acts, layout)
        glob = {"global_grad_norm": float(np.sqrt((gnorm[have] ** 2).sum())) if have else math.nan,
                "loss": loss_value, "loss_requires_grad": math.nan if loss is None else float(loss.requires_grad),
                "loss_scale": loss_scale}
        rows += [("global", GLOBAL_NAME, GLOBAL_NAME, -1, "global", k, v) for k, v in glob.items()]
        self._reset_forward()
        df = pd.DataFrame(rows, columns=["kind", "name", "module", "layer_index", "role", "stat", "value"])
        df.insert(0, "step", step)
        for col in reversed(("model", "parametrization", "width")):
            df.insert(0, col, self.labels[col])
        for col, val in self.labels.items():
            if col not in df:
                df[col] = val
        return df.astype({c: t for c, t in COLUMNS.items()})

    def _scale(self) -> tuple[torch.Tensor | None, bool]:
        """(the GradScaler's scale tensor or None, whether the grads are still scaled)."""
        s = self.scaler
        if s is None or not s.is_enabled() or getattr(s, "_scale", None) is None:
            return None, False
        from torch.amp.grad_scaler import OptState

        state = s._per_optimizer_states.get(id(self.optimizer)) if self.optimizer is not None else None
        still_scaled = state is None or state["stage"] is OptState.READY
        return s._scale, still_scaled

    def _current_layout(self) -> dict[str, tuple[int, str, int]]:
        key = tuple(self._fired)
        if key and key != self._layout_key:
            self._layout = infer_layout(self.model, list(key))
            self._layout_key = key
        return self._layout

    def _param_rows(self, gnorm: np.ndarray, pnorm: np.ndarray, nonfinite: np.ndarray,
                    layout: dict[str, tuple[int, str, int]]) -> list[tuple]:
        in_opt = None
        if self.optimizer is not None:
            in_opt = {id(p) for g in self.optimizer.param_groups for p in g["params"]}
        stale_known = self._snap is not None  # a boundary (previous step or optimizer step) was seen
        rows = []
        for i, (name, p) in enumerate(self._params):
            module = name.rsplit(".", 1)[0] if "." in name else ROOT_MODULE
            li, role, _ = layout.get(module, (-1, UNUSED, -1))
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = gnorm[i] / pnorm[i] if pnorm[i] > 0 else math.nan
            stats = {
                "grad_is_none": float(p.grad is None),
                "grad_norm": gnorm[i],
                "param_norm": pnorm[i],
                "grad_param_ratio": ratio,
                "nonfinite": nonfinite[i],
                "in_optimizer": math.nan if in_opt is None else float(id(p) in in_opt),
                "requires_grad": float(p.requires_grad),
                "backward_order": float(self._order[i]) if i in self._order else math.nan,
                "stale": (float(i in self._stale) if stale_known else math.nan),
                "numel": float(p.numel()),
                "ndim": float(p.ndim),
            }
            rows += [("param", name, module, li, role, k, v) for k, v in stats.items()]
        return rows

    def _activation_rows(self, acts: np.ndarray, layout: dict[str, tuple[int, str, int]]) -> list[tuple]:
        if not self._keys:
            return []
        m = len(DEVICE_MOMENTS)  # acts (calls, m + 2): the moments, zeros, saturated
        per_call = moment_rows(np.asarray(self._n, dtype=np.float64), acts[:, :m], DEVICE_MOMENTS)  # (calls, 5)
        names, five = pool_calls(self._keys, per_call)  # all calls of a module: one measurement
        pooled: dict[str, np.ndarray] = {}  # exact zeros, saturated entries, summed over the calls
        for name, c in zip(self._keys, acts[:, m:]):
            pooled[name] = pooled[name] + c if name in pooled else c.copy()
        counts = np.stack([pooled[n] for n in names])
        mean, std, absmax = stats_from_moments(five, MOMENT_STATS).T
        modules = dict(self.model.named_modules())
        rows = []
        for k, name in enumerate(names):
            li, role, _ = layout.get(name, (-1, UNUSED, -1))
            mod = modules.get("" if name == ROOT_MODULE else name)
            saturating = any(isinstance(mod, t) for t in SATURATING)
            n = five[k, N]
            stats = dict(zip(ACTIVATION_STATS, (mean[k], std[k], absmax[k], counts[k, 0] / n,
                                                counts[k, 1] / n if saturating else math.nan, n)))
            rows += [("activation", name, name, li, role, s, v) for s, v in stats.items()]
        return rows


def _dense(g: torch.Tensor) -> torch.Tensor:
    return g.coalesce().values() if g.is_sparse else g


def _scalar(x: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """A (1,) float32 tensor on ``device``: ``x`` (one element), or NaN when None."""
    if x is None:
        return torch.full((1,), math.nan, device=device)
    return x.reshape(1).float().to(device)


def _norms(tensors: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    """‖t‖₂ of each tensor, float32, as one (len,) tensor on ``device``; no host sync."""
    if not tensors:
        return torch.zeros(0, device=device)
    return torch.stack([n.to(device) for n in torch._foreach_norm(list(tensors), 2, dtype=torch.float32)])


# -- one-shot ----------------------------------------------------------------------------
def probe_training(model: nn.Module, batch: Batch | tuple[torch.Tensor, torch.Tensor], *,
                   optimizer: torch.optim.Optimizer | None = None, steps: int = 1, loss_fn: LossFn = cross_entropy,
                   labels: Mapping[str, object] | None = None) -> pd.DataFrame:
    """``steps`` probe steps on a fixed batch: zero grads, forward, backward, probe; between probe
    steps, ``optimizer.step()``. Step 0 is the model as given. Returns the probe's frame."""
    check_count(steps, "steps")
    if steps > 1 and optimizer is None:
        raise CoordCheckError("steps > 1 trains between probe steps: pass an optimizer")
    model = _eager(model)
    batch = as_batch(batch)
    device = next(model.parameters(), torch.empty(0)).device
    inputs, targets = batch.inputs.to(device), batch.targets.to(device)
    with GradFlowProbe(model, optimizer, labels=labels) as probe:
        for t in range(steps):
            model.zero_grad(set_to_none=True)
            loss = forward_loss(model, inputs, targets, loss_fn)
            if loss.requires_grad:  # a loss cut from the graph is what the probe diagnoses (no_gradients)
                loss.backward()
            probe.step(t, loss=loss)
            if t < steps - 1:
                optimizer.step()
        return probe.frame


def gradflow_once(model: nn.Module, batch: Batch | tuple[torch.Tensor, torch.Tensor],
                  loss_fn: LossFn = cross_entropy, optimizer: torch.optim.Optimizer | None = None, *,
                  labels: Mapping[str, object] | None = None) -> pd.DataFrame:
    """One probed forward + backward on ``batch``, no optimizer step; the parameters' ``.grad``
    are cleared first and restored afterwards, and the RNG state is restored (dropout), so the
    caller's training state is untouched. A compiled model is run through its eager module."""
    model = _eager(model)
    params = list(model.parameters())
    saved = [p.grad for p in params]
    cuda = sorted({p.device.index or 0 for p in params if p.device.type == "cuda"})
    try:
        with torch.random.fork_rng(devices=cuda):
            for p in params:
                p.grad = None
            return probe_training(model, batch, optimizer=optimizer, steps=1, loss_fn=loss_fn, labels=labels)
    finally:
        for p, g in zip(params, saved):
            p.grad = g
