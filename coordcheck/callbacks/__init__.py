"""Trainer callbacks: the recorder for any training loop (:func:`coordcheck.record`) driven by a trainer's hooks.

Stage: train, beside :mod:`coordcheck.run.recorder`. Input: a trainer's events (fitting starts, an optimizer update is
done, fitting ends or fails) with the model and optimizer they carry. Output: the recorder's job directory
(``frame.parquet``, ``job.json``), judged with ``python -m coordcheck.report runs/``.

One module per trainer, each importing its library only when imported itself: ``coordcheck.callbacks.lightning``
(PyTorch Lightning, ``pip install "coordcheck[lightning]"``) and ``coordcheck.callbacks.hf`` (the Hugging Face
``Trainer``, ``pip install "coordcheck[trainer]"``), both named ``CoordCheckCallback``. What they share, a recorder
opened and closed by hooks rather than a ``with`` block, is :class:`RecorderSession`; this package imports neither
torch nor a trainer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["RecorderSession"]

log = logging.getLogger(__name__)


class RecorderSession:
    """A :class:`~coordcheck.run.recorder.Recorder` whose ``with`` block is a trainer's fit: :meth:`open` when fitting
    starts, :meth:`step` after each optimizer update, :meth:`close` when it ends (with the exception that ended it).

    The options are the recorder's (``width``, ``out``, ``batch``, ``steps``, ``tensors``, ``**facts``) and are
    checked when the session is made, so a bad one is one line before the trainer starts."""

    def __init__(self, width: int, out: str | Path, *, batch: object = None, steps: int | Sequence[int] | None = None,
                 tensors: Sequence[str] | None = None, facts: dict[str, Any] | None = None):
        from torch import nn

        from coordcheck.run.recorder import RECORD_TENSORS, Recorder

        self.options = {"width": width, "out": out, "batch": batch, "steps": steps,
                        "tensors": tuple(RECORD_TENSORS if tensors is None else tensors), **(facts or {})}
        self.steps = Recorder(nn.Module(), **self.options).steps  # checks every option; builds and writes nothing
        self.recorder: Recorder | None = None

    @property
    def is_open(self) -> bool:
        return self.recorder is not None

    def open(self, model: Any, optimizer: Any = None, *, updates: float | None = None) -> None:
        """Enter the recorder on ``model`` (and ``optimizer``: the torch optimizer it steps, or a wrapper of it that
        holds it as ``.optimizer``, as Accelerate's does): the probe forward of step 0. ``updates``: how many the
        trainer plans (a warning when fewer than the last step to record: the run would end ``stopped``)."""
        from coordcheck.run.recorder import Recorder

        self.close()  # a second fit with the same callback: the first's recorder is done
        while optimizer is not None and hasattr(optimizer, "optimizer") and hasattr(optimizer, "param_groups"):
            optimizer = optimizer.optimizer  # accelerate's AcceleratedOptimizer: its own state lives inside
        if updates is not None and math.isfinite(updates) and 0 < updates < self.steps[-1]:
            log.warning("record: the trainer plans %d updates and the last step to record is %d: the run will end "
                        "stopped (pass steps=%d or fewer)", int(updates), self.steps[-1], int(updates))
        recorder = Recorder(model, optimizer=optimizer, **self.options)
        recorder.__enter__()
        self.recorder = recorder

    def step(self) -> None:
        """One optimizer update is done (a no-op when no recorder is open)."""
        if self.recorder is not None:
            self.recorder.step()

    def close(self, exc: BaseException | None = None) -> None:
        """Leave the recorder, writing its job directory: ``ok``, or ``stopped`` / ``interrupted`` with ``exc`` (the
        exception that ended training). A no-op when none is open."""
        recorder, self.recorder = self.recorder, None
        if recorder is None:
            return
        if exc is None:
            recorder.__exit__(None, None, None)
        else:
            recorder.__exit__(type(exc), exc, exc.__traceback__)
