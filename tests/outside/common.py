"""Outside families: public code vendored under ``tests/outside/<name>/`` (its licence and commit kept, the lines
changed listed in its ``SOURCE.md``), trained by its own training loop with ``coordcheck.record`` inserted, and
ground truth measured by the plain hooks of this module, which import nothing of coordcheck.

A family (``tests/outside/<name>/family.py``) exposes ``FAMILY``, an :class:`OutsideFamily`:

* ``run(width, out, mutant="base", seed=0, steps=10)`` trains one width in the family's own loop (its own
  optimizer set-up, schedule, clipping, ...) with ``coordcheck.record(...)`` writing the job directory ``out``;
* ``truth(width, mutant="base", seed=0, steps=10)`` trains the same, with :class:`Truth`'s hooks instead of the
  recorder, and returns its frame;
* ``mutants``: ``{"base": None, name: Plant(knob, modules), ...}`` — one knob planted wrong each, as the truth the
  judge's first cause is scored against.

This module never imports coordcheck: the ground truth must not share code with what it checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

__all__ = ["Plant", "OutsideFamily", "Truth", "slopes"]

KNOBS = ("init", "lr", "wd", "eps", "output_multiplier", "attention_scale")


@dataclass(frozen=True)
class Plant:
    """One muP knob planted wrong: ``knob`` (one of :data:`KNOBS`) of ``modules`` (dotted module names, as
    ``model.named_modules()`` gives them for the model the recorder is given)."""

    knob: str
    modules: tuple[str, ...]

    def __post_init__(self) -> None:
        assert self.knob in KNOBS, self.knob


@dataclass(frozen=True)
class OutsideFamily:
    name: str
    source: str  # "owner/repo@<commit>: the files vendored"
    licence: str
    widths: tuple[int, ...]
    base_width: int
    run: Callable[..., None]
    truth: Callable[..., pd.DataFrame]
    mutants: Mapping[str, Plant | None] = field(default_factory=lambda: {"base": None})


class Truth:
    """Plain forward hooks and optimizer step hooks, no coordcheck: each module's output std (the first floating
    tensor of its output) at every forward while :attr:`step` is set, and each parameter's update rms per optimizer
    step. ``with Truth(model, optimizers) as t: ... t.step = k`` before the forward of step k (0: at init);
    :meth:`frame` gives one row per (step, name, what, value): ``what`` ``out_std`` (module), ``update_rms`` and
    ``weight_rms`` (parameter)."""

    def __init__(self, model: nn.Module, optimizers: Iterable[torch.optim.Optimizer] = ()):
        self.model, self.optimizers = model, list(optimizers)
        self.step: int | None = None
        self.rows: list[tuple[int, str, str, float]] = []
        self._handles: list = []
        self._before: dict[str, torch.Tensor] = {}
        self._updates = 0

    def __enter__(self) -> "Truth":
        for name, module in self.model.named_modules():
            self._handles.append(module.register_forward_hook(self._hook(name or "(root)")))
        names = {id(p): n for n, p in self.model.named_parameters()}
        for opt in self.optimizers:
            self._handles.append(opt.register_step_pre_hook(lambda o, a, k: self._snapshot(names)))
            self._handles.append(opt.register_step_post_hook(lambda o, a, k: self._diff(names)))
        for n, p in self.model.named_parameters():
            self.rows.append((0, n, "weight_rms", float(p.detach().float().pow(2).mean().sqrt())))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()

    def _hook(self, name: str):
        def hook(module, args, out):
            if self.step is None:
                return
            t = out
            while isinstance(t, (tuple, list)) and t:
                t = t[0]
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 1:
                self.rows.append((self.step, name, "out_std", float(t.detach().float().std())))
        return hook

    def _snapshot(self, names: Mapping[int, str]) -> None:
        if not self._before:
            self._before = {names[id(p)]: p.detach().clone() for p in self.model.parameters() if id(p) in names}

    def _diff(self, names: Mapping[int, str]) -> None:
        if not self._before:
            return
        self._updates += 1
        for n, p in self.model.named_parameters():
            if n in self._before:
                d = (p.detach().float() - self._before[n].float()).pow(2).mean().sqrt()
                self.rows.append((self._updates, n, "update_rms", float(d)))
        self._before = {}

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=["step", "name", "what", "value"])


def slopes(frames: Mapping[int, pd.DataFrame]) -> pd.DataFrame:
    """``{width: Truth.frame()}`` -> the slope of log2(value) against log2(width) per (step, name, what), with
    numpy alone; NaN where a value is zero or missing at some width."""
    long = pd.concat([f.assign(width=w) for w, f in frames.items()], ignore_index=True)
    long = long.groupby(["step", "name", "what", "width"], as_index=False)["value"].median()
    rows = []
    for (step, name, what), g in long.groupby(["step", "name", "what"], sort=False):
        v = g["value"].to_numpy(dtype=float)
        w = g["width"].to_numpy(dtype=float)
        ok = len(g) >= 2 and np.all(np.isfinite(v)) and np.all(v > 0)
        rows.append((step, name, what, float(np.polyfit(np.log2(w), np.log2(v), 1)[0]) if ok else np.nan))
    return pd.DataFrame(rows, columns=["step", "name", "what", "slope"])


def temp_dir(root: Path, *parts: str) -> Path:
    p = root.joinpath(*parts)
    p.mkdir(parents=True, exist_ok=True)
    return p
