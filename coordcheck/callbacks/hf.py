"""A coordinate check recorded while the Hugging Face ``Trainer`` trains: ``callbacks=[CoordCheckCallback(...)]``.

Stage: train (``transformers.Trainer`` in place of coordcheck's loop). Input: the model the trainer trains, its
optimizer and its updates. Output: the recorder's job directory (``out``: ``frame.parquet``, ``job.json``), one per
width; ``python -m coordcheck.report runs/`` judges a folder of them as one sweep.

Imports ``transformers`` (``pip install "coordcheck[trainer]"``: the ``Trainer`` needs ``accelerate`` too) through
:mod:`coordcheck.setup.hf`, which sets the Hugging Face offline switches first: nothing is ever fetched.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coordcheck.callbacks import RecorderSession
from coordcheck.core.errors import CoordCheckError

try:
    import coordcheck.setup.hf  # noqa: F401  its import sets the offline switches, then imports transformers
    from transformers import TrainerCallback
except (CoordCheckError, ImportError):  # no transformers (setup.hf's own line names model=hf: not ours)
    raise CoordCheckError('coordcheck.callbacks.hf needs Hugging Face transformers and accelerate: pip install '
                          '"coordcheck[trainer]"') from None

__all__ = ["CoordCheckCallback"]


class CoordCheckCallback(TrainerCallback):
    """Record a coordinate check of the model a ``transformers.Trainer`` trains, at ``width``, into ``out``.

    ``Trainer(model, args, train_dataset=ds, callbacks=[CoordCheckCallback(width=w, out=f"runs/w{w}")]).train()``,
    one run per width (``width``: the ``hidden_size`` this run's config has), then ``python -m coordcheck.report
    runs``. At ``on_train_begin`` the recorder opens on the trainer's model with its optimizer (Accelerate's wrapper
    taken off) and records step 0 — at the first ``on_step_begin`` instead when the optimizer is made later (FSDP,
    SageMaker); at ``on_step_end`` (once per optimizer update: after ``gradient_accumulation_steps`` batches, the
    clipping, the step and the scheduler's step) ``rec.step()``; at ``on_train_end`` the job directory is written,
    status ``ok``, or ``stopped`` when training ended before the last step to record. Every process of a
    multi-process run calls it, as the recorder needs.

    The ``Trainer`` has no hook for an exception: a run that raises leaves ``job.json`` at ``running`` and no frame,
    unless the loop closes the callback with it (``except BaseException as e: cb.close(e); raise``), which writes
    the steps recorded, status ``stopped`` (``interrupted`` for Ctrl-C).

    The probe batch and the loss. A causal LM (``AutoModelForCausalLM``) needs no option: the probe batch read off
    the model is token sequences of its vocabulary (4 of 32, fewer with a shorter position table) with their
    next tokens as targets, the probe forward calls ``model(input_ids)`` and takes the cross-entropy of its
    ``logits`` — the causal-LM loss the model computes for ``labels=input_ids``, exactly. To record the model's own
    loss instead, pass ``loss="model", forward_targets="labels"`` with the batch as the model takes its labels,
    unshifted (it shifts them itself): ``batch=(ids, ids)``; with the default batch, whose targets are shifted
    already, the model would shift them again (the activations are the same; the loss column is the next token's
    but one). A model whose forward needs its labels (a classifier returning only ``loss``) passes the same two
    facts with its own ``batch=(inputs, labels)``.

    Options, as :func:`coordcheck.record`'s: ``batch`` the probe batch ``(inputs, targets)``, the same at every width
    (default: read off the model); ``steps`` the updates after which to record (a count n: 0..n, default 10; or a
    list); ``tensors`` what to record (default all the causes use); ``**facts`` what the run is
    (``parametrization="mup"``, ``lr=...``, ``seed=...``) and how the probe forward calls the model (``loss``,
    ``output``, ``forward_targets``). They are checked here: a bad one is one line before the trainer is made."""

    def __init__(self, width: int, out: str | Path, *, batch: object = None, steps: int | Sequence[int] | None = None,
                 tensors: Sequence[str] | None = None, **facts: Any):
        self.session = RecorderSession(width, out, batch=batch, steps=steps, tensors=tensors, facts=facts)
        self._pending = False  # on_train_begin came without an optimizer: open at the first on_step_begin

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       **kwargs: Any) -> None:
        self._pending = optimizer is None
        if optimizer is not None:
            self._open(model, optimizer, state)

    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                      **kwargs: Any) -> None:
        if self._pending:
            self._pending = False
            self._open(model, optimizer, state)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._pending = False
        self.session.close()

    def close(self, exc: BaseException | None = None) -> None:
        """Write the job directory now, ``stopped`` by ``exc`` (the exception that ended ``trainer.train()``); a
        no-op once written."""
        self._pending = False
        self.session.close(exc)

    def _open(self, model: Any, optimizer: Any, state: Any) -> None:
        if model is None:
            raise CoordCheckError("the Trainer passed no model to the callback: is this a transformers.Trainer?")
        model.train()  # as the Trainer's training_step sets it: step 0 is probed in the mode every later step is
        self.session.open(model, optimizer, updates=getattr(state, "max_steps", None))
