"""Probes: forward hooks that measure every module's output at every step.

Stage: measure. Input: an ``nn.Module`` and the steps of a training loop. Output: per step,
one small float64 array of raw moments per (module, tensor) — moved to the host once per
step — and the layout (``layer_index``, ``role``) of every recorded module.

How it measures. Hooks are registered once per model. While ``recording`` is on, each hook
reduces its module's output on the device, in float32, to four raw moments (sum, sum of
squares, sum of |x|, max |x|) and appends them to a list; nothing is moved to the host
inside a hook. ``end_step()`` stacks the list and moves it once. The statistics of the tidy
frame come from the moments on the host (float64): ``mean = s/n``, ``rms = sqrt(ss/n)``,
``std = sqrt((ss - s^2/n) / (n - 1))`` (unbiased, like ``torch.std``), ``l1 = a/n``
(mean |x|), ``absmax``. ``tensor=delta`` measures ``x - x0`` where ``x0`` is the same
module's output, same call, at step 0 (the batch is fixed), kept on the device.

Deliberate choices (documented for users):

* **Several calls per forward** (a shared activation module, weight tying): all calls of a
  module in one forward are pooled into one measurement (moments add up), and call k's
  ``delta`` is taken against call k's step-0 output.
* **Tuple / list / dict outputs**: the first floating-point tensor found (depth-first,
  dict values in order) is measured, as for ``(hidden, attn_weights)`` pairs; non-float
  outputs are skipped.
* **Containers and the root module**: a module with submodules whose output *is* (the same
  tensor object as) the output of the submodule that ran just before it — the root of an
  ``nn.Sequential``, a GPT returning ``lm_head(x)``, an MLP block returning ``c_proj(x)`` — is
  an alias and is not recorded twice. Otherwise the root is recorded as ``(root)`` (e.g. a
  model that applies its output multiplier in its own ``forward``).
* **Hooks outside the forward** (activation-checkpoint recomputation in backward, an extra
  eval pass) record nothing: ``recording`` is only on during the probed forward.

Layout rules (a module may override both with ``coordcheck_layer_index`` /
``coordcheck_role`` attributes):

* ``layer_index``: the *block list* is the ``nn.ModuleList``/``nn.Sequential`` with the most
  children that are themselves containers with parameters. Modules inside block ``i`` get
  ``i + 1``; other modules get ``0`` if they first ran before the first block and ``L + 1``
  after (``L`` blocks). Without a block list, each module gets the rank of the latest
  parameterised leaf that ran up to it (input layer 0, ..., readout last).
* ``role``: ``norm`` for normalisation layers; ``output`` for ``MuReadout``, for the last
  parameterised leaf to run (the readout) and for anything that runs after it;
  ``attention`` for modules named like ``*score*``/``*logit*`` inside blocks (the built-in
  GPT's ``AttentionScores``); ``input`` for embeddings and for layer index 0; else ``hidden``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch
from mup import MuReadout
from torch import nn

from coordcheck.frame import ROOT_MODULE, STATS

__all__ = ["Probes", "StepRecord", "moments", "stats_from_moments", "STAT_FUNCS", "first_tensor"]

# Raw moments kept per (module, tensor): n, sum, sum of squares, sum |x|, max |x|.
N, SUM, SUMSQ, ABSSUM, ABSMAX = range(5)
MOMENTS = ("sum", "sumsq", "abssum", "absmax")
NEEDS = {"std": ("sum", "sumsq"), "l1": ("abssum",), "rms": ("sumsq",), "mean": ("sum",), "absmax": ("absmax",)}


def needed_moments(stats: Sequence[str]) -> tuple[str, ...]:
    """The raw moments (in canonical order) that the statistics ``stats`` need."""
    unknown = [s for s in stats if s not in NEEDS]
    if unknown:
        from coordcheck.errors import CoordCheckError

        raise CoordCheckError(f"unknown statistic(s) {unknown}: use some of {list(NEEDS)}")
    need = {m for s in stats for m in NEEDS[s]}
    return tuple(m for m in MOMENTS if m in need)


def _std(m: np.ndarray) -> np.ndarray:
    n = m[:, N]
    var = (m[:, SUMSQ] - m[:, SUM] ** 2 / n) / np.maximum(n - 1, 1)
    with np.errstate(invalid="ignore"):
        return np.sqrt(np.where(var < 0, 0.0, var))  # rounding can give -eps; NaN stays NaN


# Registry of statistics computed from raw moments (rows of an (R, 5) float64 array).
STAT_FUNCS = {
    "std": _std,
    "l1": lambda m: m[:, ABSSUM] / m[:, N],
    "rms": lambda m: np.sqrt(m[:, SUMSQ] / m[:, N]),
    "mean": lambda m: m[:, SUM] / m[:, N],
    "absmax": lambda m: m[:, ABSMAX],
}


def moments(x: torch.Tensor, which: Sequence[str] = MOMENTS) -> torch.Tensor:
    """The raw moments ``which`` (of sum, sumsq, abssum, absmax) of ``x``, in float32 on its device.

    One reduction each over the flat tensor, no host sync: sum -> ``sum``, sum of squares
    -> ``dot(x, x)``, sum |x| and max |x| from one ``abs`` (measured here: twice as fast as
    ``vector_norm(x, 1)`` + ``aminmax``, and far faster than an inf-norm).
    """
    f = x.reshape(-1)
    if f.dtype != torch.float32:
        f = f.float()
    a = f.abs() if "abssum" in which or "absmax" in which else None  # one |x| serves both
    out = []
    for m in which:
        if m == "sum":
            out.append(f.sum())
        elif m == "sumsq":
            out.append(torch.dot(f, f))
        elif m == "abssum":
            out.append(a.sum())
        else:
            out.append(a.max())
    return torch.stack(out)


def stats_from_moments(m: np.ndarray, stats: Sequence[str]) -> np.ndarray:
    """(R, 5) raw moments -> (R, len(stats)) statistics, float64."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.stack([STAT_FUNCS[s](m) for s in stats], axis=1)


def first_tensor(out: object) -> torch.Tensor | None:
    """The first floating-point tensor in a (nested) tuple / list / dict output, else None."""
    if isinstance(out, torch.Tensor):
        return out if out.is_floating_point() else None
    if isinstance(out, Mapping):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        for item in out:
            t = first_tensor(item)
            if t is not None:
                return t
    return None


@dataclass
class StepRecord:
    """Moments of one step: ``keys[i] = (module, tensor)`` for row ``i`` of ``moments`` (R, 5)."""

    step: int
    keys: list[tuple[str, str]]
    moments: np.ndarray
    loss: float


@dataclass
class Probes:
    """Forward hooks on every module of ``model``; see the module docstring for the rules."""

    model: nn.Module
    tensors: Sequence[str] = ("out", "delta")
    stats: Sequence[str] = STATS
    recording: bool = False
    step: int = 0
    layout: dict[str, tuple[int, str, int]] = field(default_factory=dict)
    _handles: list = field(default_factory=list)
    _keys: list = field(default_factory=list)
    _n: list = field(default_factory=list)
    _vals: list = field(default_factory=list)
    _ref: dict = field(default_factory=dict)
    _calls: Counter = field(default_factory=Counter)
    _fired: list = field(default_factory=list)  # module names in first-fire order at step 0
    _alias: set = field(default_factory=set)
    _last_out: object = None

    def __post_init__(self) -> None:
        self._which = needed_moments(self.stats)
        self._cols = [1 + MOMENTS.index(m) for m in self._which]  # their columns in the (R, 5) array
        self._modules = dict(self.model.named_modules())
        for name, module in self._modules.items():
            self._handles.append(module.register_forward_hook(partial(self._hook, name or ROOT_MODULE)))

    # -- the hook ---------------------------------------------------------------------
    def _hook(self, name: str, module: nn.Module, inputs: object, output: object) -> None:
        if not self.recording or name in self._alias:
            return
        x = first_tensor(output)
        if x is None or x.numel() == 0:
            return
        if self.step == 0 and x is self._last_out and next(module.children(), None) is not None:
            self._alias.add(name)  # a container returning its last submodule's output
            return
        self._last_out = x
        call = self._calls[name]
        self._calls[name] += 1
        if self.step == 0 and call == 0:
            self._fired.append(name)
        with torch.no_grad():
            x = x.detach()
            self._push(name, "out", x)
            if "delta" in self.tensors:
                if self.step == 0:
                    self._ref[name, call] = x.clone()
                else:
                    ref = self._ref.get((name, call))
                    if ref is not None and ref.shape == x.shape:
                        self._push(name, "delta", x - ref)

    def _push(self, name: str, tensor: str, x: torch.Tensor) -> None:
        if tensor in self.tensors:
            self._keys.append((name, tensor))
            self._n.append(x.numel())
            self._vals.append(moments(x, self._which))

    # -- the loop's side ----------------------------------------------------------------
    def begin_step(self, step: int) -> None:
        self.step = step
        self.recording = True
        self._keys, self._n, self._vals = [], [], []
        self._calls = Counter()
        self._last_out = None

    def end_step(self, loss: torch.Tensor) -> StepRecord:
        """Stop recording, move this step's moments and the loss to the host in one transfer."""
        self.recording = False
        if self.step == 0:
            self.layout = infer_layout(self.model, self._fired)
        packed = torch.cat([torch.stack(self._vals).reshape(-1), loss.detach().float().reshape(1)]) if self._vals \
            else loss.detach().float().reshape(1)
        host = packed.cpu().double().numpy()  # the one device-to-host transfer of the step
        raw = np.full((len(self._n), 5), np.nan)
        raw[:, N] = self._n
        raw[:, self._cols] = host[:-1].reshape(len(self._n), len(self._cols))
        keys, raw = _pool_calls(self._keys, raw)
        return StepRecord(self.step, keys, raw, float(host[-1]))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._ref.clear()

    def __enter__(self) -> Probes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _pool_calls(keys: list[tuple[str, str]], raw: np.ndarray) -> tuple[list[tuple[str, str]], np.ndarray]:
    """Pool the moments of several calls of one module: counts and sums add, max of maxima."""
    if len(set(keys)) == len(keys):
        return keys, raw
    index: dict[tuple[str, str], int] = {}
    rows: list[np.ndarray] = []
    for key, row in zip(keys, raw):
        if key in index:
            acc = rows[index[key]]
            acc[:ABSMAX] += row[:ABSMAX]
            acc[ABSMAX] = max(acc[ABSMAX], row[ABSMAX]) if np.isfinite(row[ABSMAX]) else row[ABSMAX]
        else:
            index[key] = len(rows)
            rows.append(row.copy())
    return list(index), np.stack(rows)


# -- layout ---------------------------------------------------------------------------
NORM_TYPES = tuple(
    t for t in (
        nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm, getattr(nn, "RMSNorm", None),
        nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm,
    ) if t is not None
)
ATTENTION_NAME = re.compile(r"(score|logit)", re.IGNORECASE)


def _has_params(module: nn.Module, recurse: bool = True) -> bool:
    return next(module.parameters(recurse=recurse), None) is not None


def _block_list(model: nn.Module) -> tuple[str, int] | None:
    best = None
    for name, m in model.named_modules():
        if not isinstance(m, (nn.ModuleList, nn.Sequential)) or len(m) < 2:
            continue
        blocks = [c for c in m.children() if next(c.children(), None) is not None and _has_params(c)]
        if len(blocks) >= 2 and (best is None or len(m) > best[1]):
            best = (name, len(m))
    return best


def _is_norm(module: nn.Module) -> bool:
    return isinstance(module, NORM_TYPES) or type(module).__name__.endswith("Norm")


def infer_layout(model: nn.Module, fired: list[str]) -> dict[str, tuple[int, str, int]]:
    """``{module name: (layer_index, role, call_order)}`` for the modules that fired at step 0 (in order)."""
    modules = {(n or ROOT_MODULE): m for n, m in model.named_modules()}
    order = {n: i for i, n in enumerate(fired)}
    leaves = [n for n in fired if _has_params(modules[n], recurse=False) and next(modules[n].children(), None) is None]
    readout = next((n for n in reversed(leaves) if not _is_norm(modules[n])), None)
    blocks = _block_list(model)
    index: dict[str, int] = {}
    if blocks is not None:
        bname, L = blocks
        prefix = f"{bname}." if bname else ""
        in_blocks = [order[n] for n in fired if n.startswith(prefix) and n != ROOT_MODULE]
        first_block = min(in_blocks) if in_blocks else 0
        for n in fired:
            if n == (bname or ROOT_MODULE):
                index[n] = L  # a Sequential trunk returns its last block's output
            elif n != ROOT_MODULE and n.startswith(prefix) and n[len(prefix):].split(".")[0].isdigit():
                index[n] = int(n[len(prefix):].split(".")[0]) + 1
            else:
                index[n] = 0 if order[n] < first_block else L + 1
    else:
        rank = 0
        leaf_rank = {n: i for i, n in enumerate(leaves)}
        for n in fired:
            rank = leaf_rank.get(n, rank)
            index[n] = rank
    layout = {}
    after_readout = False
    for n in fired:
        m = modules[n]
        i = getattr(m, "coordcheck_layer_index", index[n])
        if _is_norm(m):
            role = "norm"
        elif isinstance(m, MuReadout) or n == readout or after_readout or n == ROOT_MODULE:
            role = "output"
        elif isinstance(m, nn.Embedding) or index[n] == 0:
            role = "input"
        elif ATTENTION_NAME.search(n.rsplit(".", 1)[-1]):
            role = "attention"
        else:
            role = "hidden"
        after_readout = after_readout or n == readout
        layout[n] = (int(i), getattr(m, "coordcheck_role", role), order[n])
    return layout
