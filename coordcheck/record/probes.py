"""Probes: forward hooks (and a function probe) that measure every activation at every step.

Stage: measure. Input: an ``nn.Module`` and the steps of a training loop. Output: per step,
one small float64 array of moments per (module, tensor) — moved to the host once per
step — and the layout (``layer_index``, ``role``) of every recorded module.

How it measures. Hooks are registered once per model. While ``recording`` is on, each hook
reduces its module's output on the device, in float32, to a few moments (the sum and sum of
squares of ``x - c``, ``c`` its first element; sum |x| and max |x| from one ``abs``) and
appends them to a list; nothing is moved to the host inside a hook. ``end_step()`` concatenates
the list and moves it once. The temporaries (``x - c``, ``|x|``, ``x - x0``) are written to two
scratch buffers that every hook and step reuse (grown to the largest tensor, up to
``SCRATCH_MAX`` elements): fresh ones per tensor can be mapped and page-faulted in on every call
by the CPU allocator (measured: the moments of a 4 MiB tensor 10x slower). So a step allocates
nothing per module but its moments, and each tensor costs its passes (a subtraction, a sum, a
dot, an ``abs``, a sum, a max; one more subtraction for ``delta``) and a few tiny ops. At small
widths the cost is per op and per Python call, not per element, so the hooks make as few as they
can: ``x`` is read in its own shape through a shaped view of the scratch buffer (no flat view of
it), with grad off instead of a ``detach``, and the forward pre-hooks that keep the module stack
(for the function probe, below) are registered only while the function probe runs.
The statistics of the tidy frame come from the moments on the host (float64):
``mean``, ``std = sqrt(var * n / (n - 1))`` (unbiased, like ``torch.std``), ``rms =
sqrt(var + mean^2)``, ``l1 = sum|x| / n`` (mean |x|), ``absmax``. The shift makes a constant
tensor's std exactly 0 (raw sums of squares would not).
``tensor=delta`` measures ``x - x0`` where ``x0`` is the same module's output, same call, at
step 0 (the batch is fixed), kept on the device.

**Attention logits wherever they are computed.** During the probed forward a
``torch.overrides.TorchFunctionMode`` sees every torch function call, and records the
attention logits that no module returns, under the name of the module that computed them
plus a suffix, with role ``attention``. It is on at step 0 and, after it, only in models where it
recorded (or decided) something at step 0: the batch is fixed, so each forward calls the same
functions, and the mode taxes every torch call of the forward (a third of the probes' Python cost
in the built-in GPT, which exposes its logits as a module and so needs no capture).

* ``F.scaled_dot_product_attention`` -> ``<module>.(sdpa)``: its implicit logits
  ``q @ k^T * scale`` (``scale`` as passed, default ``1/sqrt(d_head)``; grouped-query heads
  repeated), over the entries the kernel attends to (``is_causal`` and boolean masks
  applied); with a float mask (which may carry a bias) it is added and the name is
  ``<module>.(sdpa+mask)``.
* ``nn.MultiheadAttention`` (``F.multi_head_attention_forward``) -> ``<module>.(mha)``:
  ``q k^T / sqrt(d_head)`` from its own input projections (``key_padding_mask`` ignored;
  ``(mha+mask)`` with a float ``attn_mask``).
* The **head dimension** of each ``(sdpa)`` / ``(mha)`` capture (q's last dimension, which
  q.k sums over; ``E // num_heads`` for ``(mha)``) is kept per name (the first call's) in
  ``Probes.head_dims`` and in every ``StepRecord``, and becomes the frame's ``head_dim``
  column: the verdict judges the step-0 1/d_head test only where it grows with width. Both
  reduction paths (per hook, batched) go through :meth:`Probes.capture`, so they record it alike.
* Hand-written attention -> ``<module>.(softmax)``: the input of a ``softmax`` /
  ``log_softmax`` over the last dimension, unless that input is a module's output (then it
  is a readout's logits, already recorded) or a module inside the same parent already
  exposed the logits (a module named ``*score*``/``*logit*`` or with ``coordcheck_role =
  "attention"``, as the built-in GPT's ``AttentionScores``). Entries at or below ``-1e4``
  (masks filled with ``-inf``, ``-1e9`` or ``finfo.min``) are left out; NaN and +inf stay.
* A **router's choice** (a ``topk`` over the last dimension inside a module: ``k`` of ``E`` experts per token; a
  grouped router's top-k over the experts, not over its groups; or the indices a router module returns beside its
  logits) -> ``<module>.(load)``, ``tensor="load"``: how evenly the tokens spread over the experts, ``max_load`` and
  ``entropy`` (:mod:`coordcheck.record.load`), counted over every call of the module in the forward. A router whose
  choice is not counted (a top-k of every expert, ...) gets one line in ``Probes.notes``, which the job logs.
  Experts kept as a list of ``E`` modules beside that router are recorded as one module per layer
  (``experts.*.fc1``: their moments pooled, exactly as several calls of one module are), unless
  ``pool_experts=False``.
* A model that **ends in** ``log_softmax``/``softmax``: its output (probabilities) is not
  judged; the logits are — the readout module when the softmax is applied to its output,
  else the softmax's input, recorded as ``(logits)`` with role ``output``.

Deliberate choices (documented for users):

* **Modules as a reader counts them.** A module whose output *is* its input (``Identity``,
  ``Dropout`` in eval or with p=0, an empty ``nn.Sequential`` shortcut) is not recorded,
  unless it declares ``coordcheck_role``. A module with submodules whose output *is* the
  output of the submodule that ran just before it (the root of an ``nn.Sequential``, a GPT
  returning ``lm_head(x)``) is an alias and is not recorded twice. Otherwise the root is
  recorded as ``(root)`` (e.g. a model that applies its output multiplier in ``forward``).
* **Several calls per forward** (a shared activation module, weight tying): all calls of a
  module in one forward are pooled into one measurement (moments combine exactly), and
  call k's ``delta`` is taken against call k's step-0 output.
* **Tuple / list / dict outputs**: the first floating-point tensor found (depth-first,
  dict values in order) is measured, as for ``(hidden, attn_weights)`` pairs; for the root,
  ``output=`` (an index or a key) selects the logits instead. A root that returns one number (its
  loss alone, nanochat's ``forward(idx, targets)`` under ``loss=model``) has no ``(root)`` row: the
  logits are the input of the first loss function of ``torch.nn.functional`` it called
  (``F.cross_entropy``, ...), recorded as ``(logits)`` with role ``output`` when they are not the
  readout module's output itself (an output multiplier or a soft cap applied in ``forward``).
* **Hooks outside the forward** (activation-checkpoint recomputation in backward, an extra
  eval pass) record nothing: ``recording`` is only on during the probed forward.

Layout rules (``layer_index``, ``role``): :mod:`coordcheck.record.layout`. Moments and the statistics
from them: :mod:`coordcheck.record.moments`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch
from torch import nn

from coordcheck.core.frame import DEFAULT_TENSORS, ROOT_MODULE, STATS
from coordcheck.record.capture import MASK_BELOW, FunctionProbe
from coordcheck.record.layout import (  # noqa: F401  (the layout names: re-exported for old imports)
    ATTENTION_NAME, CONTAINERS, NORM_TYPES, UNCALLED, find_blocks, infer_layout, module_ops,
)
from coordcheck.record.load import Choices, expert_members, expert_stacks, load_stats, pooled_layout
from coordcheck.record.ranks import StepGather, merge_first_seen, pool_step, world
from coordcheck.record.moments import (  # noqa: F401  (the moment names: re-exported for old imports)
    MOMENTS, NEEDS, STAT_FUNCS, batched_moments, masked_moments, moment_rows, moment_terms, moments, needed_moments,
    pool_calls, pool_moments, pool_ranks, stats_from_moments, N, MEAN, VAR, ABSSUM, ABSMAX,
)
from coordcheck.record.outputs import (  # noqa: F401  (first_tensor, select_output: re-exported)
    LOGITS_MODULE, LossLogits, first_tensor, is_bare_loss, select_output,
)
from coordcheck.record.routing import RouterHooks
from coordcheck.record.own import OwnUpdate

__all__ = ["Probes", "StepRecord", "moments", "batched_moments", "moment_rows", "masked_moments", "stats_from_moments",
           "pool_moments", "STAT_FUNCS", "first_tensor", "select_output", "infer_layout", "LOGITS_MODULE", "MASK_BELOW"]

# What a capture is, by the function that computed it (a hand-written softmax's: capture.FunctionProbe decides)
CAPTURE_OPS = {"(sdpa)": "qk", "(mha)": "qk", "(sdpa+mask)": "qk+mask", "(mha+mask)": "qk+mask"}


BATCH_BUDGET = 1 << 26  # batched probes: float32 elements snapshotted (256 MiB) before a step reduces them early
SCRATCH_MAX = 1 << 24  # per-hook probes: tensors up to this many elements (64 MiB) reduce in two reused buffers


@dataclass
class StepRecord:
    """Moments of one step: ``keys[i] = (module, tensor)`` for row ``i`` of ``moments`` (R, 5); ``head_dims``: the
    head dimension of each captured ``(sdpa)`` / ``(mha)`` module (others absent)."""

    step: int
    keys: list[tuple[str, str]]
    moments: np.ndarray
    loss: float
    head_dims: dict[str, int] = field(default_factory=dict)
    modules: dict[str, dict] = field(default_factory=dict)  # name -> {op, declared}, decided at step 0 (layout)
    loads: dict[str, tuple[float, float]] = field(default_factory=dict)  # router load name -> record.load.LOAD_STATS
    notes: dict[str, str] = field(default_factory=dict)  # module -> why its router's choice is not counted (step 0)


@dataclass
class Probes(RouterHooks, LossLogits):
    """Forward hooks on every module of ``model`` and a function probe; see the module docstring."""

    model: nn.Module
    tensors: Sequence[str] = DEFAULT_TENSORS
    stats: Sequence[str] = STATS
    output: int | str | None = None  # selects the logits in the root's tuple / dict output
    batched: bool | None = None  # reduce a step's tensors together at its end (None: on CUDA, not on the CPU)
    pool_experts: bool = True  # a list of expert modules recorded as one per layer (record.load.expert_lists)
    batch_shape: tuple | None = None  # this process's batch inputs' shape (several processes: record.ranks.share_rows)
    recording: bool = False
    step: int = 0
    layout: dict[str, tuple[int, str, int]] = field(default_factory=dict)
    _handles: list = field(default_factory=list)
    _keys: list = field(default_factory=list)
    _n: list = field(default_factory=list)
    _vals: list = field(default_factory=list)
    _mkeys: list = field(default_factory=list)  # masked records: the count is on the device
    _mvals: list = field(default_factory=list)
    _ref: dict = field(default_factory=dict)
    _calls: dict = field(default_factory=dict)  # name -> calls recorded this forward
    _fired: list = field(default_factory=list)  # names in first-record order at step 0
    _alias: set = field(default_factory=set)
    _captured: dict = field(default_factory=dict)  # captured name -> the module that computed it
    _capture_ops: dict = field(default_factory=dict)  # captured name -> what it is (capture.FunctionProbe's ops)
    modules: dict = field(default_factory=dict)  # name -> {op, declared} of what was recorded at step 0
    head_dims: dict = field(default_factory=dict)  # captured (sdpa) / (mha) name -> q's last dimension (first call)
    _renamed: dict = field(default_factory=dict)  # capture name -> LOGITS_MODULE (model ends in softmax)
    _stack: list = field(default_factory=list)  # modules whose forward is running, innermost last
    _attn_parents: set = field(default_factory=set)  # modules that exposed attention logits this step
    _softmax_out: tuple | None = None  # (result tensor, capture name or None) of the latest softmax
    _pooled: dict = field(default_factory=dict)  # an expert list member's name -> its layer's name (step 0 on)
    _shapes: dict = field(default_factory=dict)  # recorded name -> its output's shape at step 0 (first call)
    _last_out: object = None
    _loss_in: tuple | None = None  # (the first loss function's input this forward, what it is, its softmax capture)
    notes: dict = field(default_factory=dict)  # module -> one line: a router whose choice was not counted (step 0)
    leaves_done: int = 0  # leaf modules that finished this forward (for blaming errors)

    def __post_init__(self) -> None:
        self._procs = world()[1]  # several: each row's count is gathered too (a routed expert's differs by process)
        self._gather = StepGather()  # (its capacity: what every process's step buffer fits in)
        several = self._procs > 1 and "own" in self.tensors  # own's rms is taken after pooling (record.own.settle)
        self._which = needed_moments([*self.stats, "rms"] if several else self.stats)
        self._delta = "delta" in self.tensors
        self._reduced, self._pending = [], 0  # batched: moments already reduced this step, elements pending
        self._scratch = [torch.empty(0), torch.empty(0)]  # per hook: |x|, x - c; x - x0 (grown to the largest tensor)
        self._views: dict = {}  # (buffer, shape, device index) -> (flat, shaped) views of a scratch buffer
        if self.batched is None:  # per-hook reductions are the faster path on the CPU (benchmarked)
            self.batched = next(self.model.parameters(), torch.empty(0)).device.type == "cuda"
        owners: dict[int, set[str]] = {}
        for name, module in self.model.named_modules():
            for param in module.parameters(recurse=False):
                owners.setdefault(id(param), set()).add(name or ROOT_MODULE)
        self._mode = FunctionProbe(self, owners)
        self._mode_on = False
        self._tracking = False  # the function probe and the module stack it reads are on for this forward
        self._functions_seen = False  # the function probe recorded (or decided) something at step 0
        self._named = [(name or ROOT_MODULE, module) for name, module in self.model.named_modules()]
        self._enter_handles: list = []  # the pre-hooks that keep the module stack (only while the function probe runs)
        self._stack_hooks(True)
        for name, module in self._named:
            declared, role = hasattr(module, "coordcheck_role"), getattr(module, "coordcheck_role", None)
            attention = role == "attention" or (role is None and bool(ATTENTION_NAME.search(name.rsplit(".", 1)[-1])))
            self._handles.append(module.register_forward_hook(partial(
                self._hook, name, declared, next(module.children(), None) is None, attention)))
        self._handles.append(self.model.register_forward_hook(self._root_done, always_call=True))
        # in / own: hooks of their own, registered after these, so they run after a module's output is recorded
        self._own = OwnUpdate(self) if {"in", "own"} & set(self.tensors) else None
        self._choices = Choices()  # the routers' choices of experts (record.load)
        self._counts_load = "out" in self.tensors  # (a forward that records in / own only: no load)
        self._stacks = expert_stacks(self.model)  # modules holding a 3-D expert stack -> their number of experts

    # -- hooks ------------------------------------------------------------------------
    def _stack_hooks(self, on: bool) -> None:
        """Register (``on``) or remove the forward pre-hooks that keep the module stack. Only the function probe reads
        the stack (which module computed a capture), so after step 0 a model where it found nothing runs without them:
        each costs a Python call per module and forward, a measurable part of the probes' cost at small widths."""
        if on and not self._enter_handles:
            self._enter_handles = [module.register_forward_pre_hook(partial(self._enter, name))
                                   for name, module in self._named]
        elif not on and self._enter_handles:
            for h in self._enter_handles:
                h.remove()
            self._enter_handles = []

    def _enter(self, name: str, module: nn.Module, inputs: object) -> None:
        if not (self._tracking and self.recording):  # not recording: the own update's extra calls (record.own)
            return
        self._stack.append(name)
        if name == ROOT_MODULE and not self._mode_on:
            self._mode.__enter__()
            self._mode_on = True

    def _root_done(self, module: nn.Module, inputs: object, output: object) -> None:
        if self._mode_on:  # also when the forward raised (always_call): never leave the mode on
            self._mode.__exit__(None, None, None)
            self._mode_on = False

    def _hook(self, name: str, declared: bool, leaf: bool, attention: bool, module: nn.Module, inputs: object,
              output: object) -> None:
        if not self.recording:
            return
        if self._stack and self._stack[-1] == name:
            self._stack.pop()
        self.leaves_done += leaf
        if (self.step == 0 or name in self._choices.returned) and self._counts_load:
            with torch._C.DisableTorchFunction(), torch.no_grad():  # (the probe's own ops: not the function probe's)
                self._returned_choice(name, module, inputs, output)
        if name in self._alias:
            return
        if name == ROOT_MODULE:
            if is_bare_loss(output):  # the model returned its loss alone: the logits are the loss's input
                self._loss_logits()
                return
            self._loss_in = None  # (the logits are in what it returned: keep no reference to the loss's input)
            x = first_tensor(select_output(output, self.output))
            if x is not None and self._softmax_out is not None and x is self._softmax_out[0]:
                self._ends_in_softmax(self._softmax_out[1])
                return
        elif isinstance(output, torch.Tensor):  # the common case, without first_tensor's walk
            x = output if output.is_floating_point() else None
        else:
            x = first_tensor(output)
        if x is None or x.numel() == 0:
            return
        if not declared:
            first = inputs[0] if inputs and isinstance(inputs[0], torch.Tensor) else None
            if x is (first if first is not None and first.is_floating_point() else first_tensor(inputs)):
                return  # Identity, Dropout(p=0) or in eval, an empty shortcut: the output is the input
        if self.step == 0 and x is self._last_out and not leaf:
            self._alias.add(name)  # a container returning its last submodule's output
            return
        self._last_out = x
        if attention and self._tracking:
            self._attn_parents.add(self._stack[-1] if self._stack else ROOT_MODULE)
        grad = torch.is_grad_enabled()  # grad off instead of x.detach(): the same, one aten op fewer per module
        torch._C._set_grad_enabled(False)
        try:
            with torch._C.DisableTorchFunction():  # the probe's own reductions do not pass through the function probe
                self._record(name, x)
        finally:
            torch._C._set_grad_enabled(grad)

    # -- the function probe's side ------------------------------------------------------
    def _parent(self) -> str:
        return self._stack[-1] if self._stack else ROOT_MODULE

    def capture(self, suffix: str, logits: torch.Tensor, keep: torch.Tensor | None, head_dim: int = 0,
                op: str = "") -> str:
        """Record attention logits computed inside the running module as ``<module>.<suffix>``; ``head_dim``: the
        dimension q.k summed over, when known (0: not known, as for a hand-written softmax's input); ``op``: what the
        logits are (:data:`CAPTURE_OPS` of the suffix unless given)."""
        parent = self._parent()
        name = suffix if parent == ROOT_MODULE else f"{parent}.{suffix}"
        name = self._renamed.get(name, name)
        self._captured.setdefault(name, parent)
        self._capture_ops.setdefault(name, op or CAPTURE_OPS.get(suffix, ""))  # step 0's: the calls are the same
        self._functions_seen = True
        if head_dim:
            self.head_dims.setdefault(name, int(head_dim))
        self._record(name, logits, keep)
        return name

    def softmax(self, x: torch.Tensor, result: object) -> None:
        if x is self._last_out:  # probabilities of a module's output (a readout): not attention logits
            self._softmax_out = (result, None)
            self._functions_seen = True  # the root's record depends on it at every step
            return
        if self._parent() in self._attn_parents:
            return  # a module already exposed these logits (e.g. the built-in GPT's attn.scores)
        op = "qk-softmax" if self._mode.over_product(x) else "softmax"  # over q·kᵀ, or a projection (a router)
        x = x.detach()
        self._softmax_out = (result, self.capture("(softmax)", x, ~(x <= MASK_BELOW), op=op))

    def _ends_in_softmax(self, capture: str | None) -> None:
        """The root returned the latest softmax: judge the logits, not the probabilities."""
        if capture is None or capture == LOGITS_MODULE:
            return  # the readout's output is already recorded (or this capture already is the logits)
        self._renamed[capture] = LOGITS_MODULE
        self._captured.pop(capture, None)
        self._capture_ops[LOGITS_MODULE] = "logits"
        if self.step == 0:  # rename what this step recorded under the capture's name
            ren = lambda key: (LOGITS_MODULE, key[1]) if key[0] == capture else key  # noqa: E731
            self._mkeys = [ren(k) for k in self._mkeys]
            self._keys = [ren(k) for k in self._keys]
            self._fired = [LOGITS_MODULE if n == capture else n for n in self._fired]
            self._ref = {(LOGITS_MODULE if n == capture else n, c): v for (n, c), v in self._ref.items()}
            self._calls[LOGITS_MODULE] = self._calls.pop(capture, 0)

    # -- recording ----------------------------------------------------------------------
    def _record(self, name: str, x: torch.Tensor, keep: torch.Tensor | None = None) -> None:
        """Reduce ``x`` (read with grad off) as ``out``, and its change since step 0 as ``delta``."""
        call = self._calls.get(name, 0)
        self._calls[name] = call + 1
        if self.step == 0 and call == 0:
            self._fired.append(name)
            self._shapes[name] = list(x.shape)  # (a fact: which dimensions a module's output has, judge.experts)
        self._push(name, "out", x, keep)
        if self._delta:
            if self.step == 0:  # float32, so that a bf16 / fp16 run's delta is taken in float32
                self._ref[name, call] = (x.to(torch.float32, copy=True), keep)
            else:
                ref = self._ref.get((name, call))
                if ref is not None and ref[0].shape == x.shape:
                    both = keep if ref[1] is None else (ref[1] if keep is None else keep & ref[1])
                    buf = self._buffer(1, x) if both is None and not self.batched else None
                    if buf is None:
                        self._push(name, "delta", x.float() - ref[0], both)
                    else:  # x - x0 in float32 (x promoted) into the second buffer; reduced from its flat view
                        torch.sub(x, ref[0], out=buf[1])
                        self._push(name, "delta", buf[0], None)

    def _buffer(self, i: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Views ``(flat, shaped like x)`` of scratch buffer ``i`` (float32, ``x.numel()`` elements on ``x``'s
        device), or None for a tensor past ``SCRATCH_MAX``. Reused by every hook and step, so that no step allocates
        (and page-faults in) its temporaries; the views are made once per shape (the batch is fixed)."""
        key = (i, x.shape, x.get_device())
        views = self._views.get(key)
        if views is None:
            n = x.numel()
            if n > SCRATCH_MAX or x.ndim == 0:  # (a 0-d output, a model returning its loss: no flat view to share)
                return None
            buf = self._scratch[i]
            if buf.numel() < n or buf.device != x.device:
                buf = self._scratch[i] = torch.empty(n, device=x.device)
                self._views = {k: v for k, v in self._views.items() if k[0] != i}  # views of the old buffer
            views = self._views[key] = (buf[:n], buf[:n].view(x.shape))
        return views

    def _push(self, name: str, tensor: str, x: torch.Tensor, keep: torch.Tensor | None) -> None:
        if tensor not in self.tensors:
            return
        if keep is None:
            self._keys.append((name, tensor))
            self._n.append(x.numel())
            if self.batched:  # a float32 snapshot (one kernel): later in-place ops must not change it
                self._vals.append(x.reshape(-1).to(torch.float32, copy=tensor == "out"))
                self._pending += x.numel()
                if self._pending > BATCH_BUDGET:  # bound the snapshots' memory: reduce what is pending now
                    self._reduced.append(batched_moments(self._vals, self._which))
                    self._vals, self._pending = [], 0
            else:  # the moments as (1,) tensors, concatenated once at the step's end
                buf = self._buffer(0, x)
                self._vals += moment_terms(x, self._which, *(buf or ()))  # into the scratch: (flat, shaped like x)
        else:
            self._mkeys.append((name, tensor))
            self._mvals.append(masked_moments(x, keep))

    # -- the loop's side ----------------------------------------------------------------
    def begin_step(self, step: int) -> None:
        self.step = step
        self.recording = True
        self._keys, self._n, self._vals, self._mkeys, self._mvals = [], [], [], [], []
        self._reduced, self._pending = [], 0
        self._calls = {}
        self._choices.begin_step()
        self._tracking = step == 0 or self._functions_seen  # later forwards call the same functions (fixed batch)
        self._stack_hooks(self._tracking)
        self._stack, self._attn_parents = [], set()
        self._last_out = self._softmax_out = self._loss_in = None
        self.leaves_done = 0
        if self._own is not None:
            self._own.begin_step()

    def end_step(self, loss: torch.Tensor) -> StepRecord:
        """Stop recording, move this step's moments and the loss to the host in one transfer."""
        self.recording = self._tracking = False
        self._root_done(self.model, (), None)
        if self.step == 0:
            if self._procs > 1:  # what any process recorded (a routed expert may run on some only)
                self._fired, self._shapes = merge_first_seen(self._fired, self._shapes)
            self.layout = infer_layout(self.model, self._fired, self._captured)
            self.modules = module_ops(self.model, self._fired, self._capture_ops, self._mode.ops)
            for n, info in self.modules.items():
                if n in self._shapes:
                    info["shape"] = self._shapes[n]
            self._mode.clear()  # the products followed at step 0: their ops are known
            loads = self._choices.counts
            if self.pool_experts and loads:
                self._pooled = expert_members(self.model, {n: c.numel() for n, c in loads.items()},
                                              self._captured, self._fired)
                pooled_layout(self._pooled, self.layout, self.modules)
            self.notes = self._choices.notes([self._captured[n] for n in loads])
        parts = []
        if self.batched:
            done = self._reduced + ([batched_moments(self._vals, self._which)] if self._vals else [])
            if done:
                parts.append(torch.cat(done).reshape(-1))
        elif self._vals:
            parts.append(torch.cat(self._vals))
        own_keys, own_n, own = self._own.flush(self._which) if self._own is not None else ([], [], None)
        if own is not None:  # in / own rows: after this step's other unmasked rows
            parts.append(own.reshape(-1))
            self._keys, self._n = self._keys + own_keys, self._n + own_n
        if self._mvals:
            parts.append(torch.stack(self._mvals).reshape(-1))
        chosen = self._choices.counts
        loads = list(chosen)
        sizes = [chosen[n].numel() for n in loads]
        if loads:  # the tokens each expert got (the statistics follow on the host, from every process's counts)
            parts.append(torch.cat([chosen[n] for n in loads]).float())
        own_at = len(self._n) - len(own_n)  # the in / own rows: the whole batch's sample (record.own, record.ranks)
        keys, raw, counts, loss_value = pool_step(parts, loss, self._keys + self._mkeys, self._n, self._which, loads,
                                                  sizes, self._gather, self._own if own_n else None, own_at)
        if self._pooled:  # an expert list's members: one measurement per layer (moments pool exactly)
            keys = [(self._pooled.get(n, n), t) for n, t in keys]
        keys, raw = pool_calls(keys, raw)
        self._last_out = self._softmax_out = self._loss_in = None  # hold no activation past the step
        self._vals, self._reduced, self._pending = [], [], 0
        self._choices.begin_step()
        return StepRecord(self.step, keys, raw, loss_value, dict(self.head_dims), self.modules,
                          {name: load_stats(c) for name, c in zip(loads, counts)}, self.notes)

    def remove(self) -> None:
        self._root_done(self.model, (), None)
        self._stack_hooks(False)
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._ref.clear()
        if self._own is not None:
            self._own.clear()  # θ_0
        self._vals, self._mvals, self._reduced = [], [], []  # no snapshot outlives the probes (after an error)
        self._scratch, self._views = [torch.empty(0), torch.empty(0)], {}

    def __enter__(self) -> Probes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

