"""A coordinate check recorded while PyTorch Lightning trains: ``Trainer(callbacks=[CoordCheckCallback(...)])``.

Stage: train (Lightning's fit in place of coordcheck's loop). Input: the LightningModule the trainer fits, the
trainer's first optimizer and its updates. Output: the recorder's job directory (``out``: ``frame.parquet``,
``job.json``), one per width; ``python -m coordcheck.report runs/`` judges a folder of them as one sweep.

Imports ``lightning.pytorch`` (``pip install "coordcheck[lightning]"``), else the older ``pytorch_lightning``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

from coordcheck.callbacks import RecorderSession
from coordcheck.core.errors import CoordCheckError

try:
    import lightning.pytorch as pl
except ImportError:  # only the older package name installed
    try:
        import pytorch_lightning as pl
    except ImportError:
        raise CoordCheckError('coordcheck.callbacks.lightning needs PyTorch Lightning: pip install '
                              '"coordcheck[lightning]"') from None

__all__ = ["CoordCheckCallback"]


class CoordCheckCallback(pl.Callback):
    """Record a coordinate check of the LightningModule the trainer fits, at ``width``, into ``out``.

    ``trainer = Trainer(max_steps=10, callbacks=[CoordCheckCallback(width=w, out=f"runs/w{w}")])``, one run per
    width, then ``python -m coordcheck.report runs``. When training starts (``on_train_start``: the optimizers
    exist) the recorder opens on the LightningModule with the trainer's first optimizer and records step 0; after
    each optimizer update (``trainer.global_step`` moved: once per ``accumulate_grad_batches`` batches, after
    clipping and the scheduler's step) ``rec.step()`` records it when it is a step to record; when training ends the
    job directory is written with status ``ok``, or ``stopped`` (``interrupted`` for Ctrl-C) when it raised or ended
    before the last step to record. Every process of a multi-process run calls it, as the recorder needs.

    The probe forward calls the LightningModule itself, ``pl_module(inputs)``: its ``forward`` must take the probe
    batch's inputs and return the logits (or a tuple / ``ModelOutput`` holding them: ``output=``). A LightningModule
    that keeps its network in an attribute and has no ``forward`` names it: ``module="net"`` probes
    ``pl_module.net``.

    Options, as :func:`coordcheck.record`'s: ``batch`` the probe batch ``(inputs, targets)``, the same at every width
    (default: read off the model); ``steps`` the updates after which to record (a count n: 0..n, default 10; or a
    list); ``tensors`` what to record (default all the causes use); ``**facts`` what the run is
    (``parametrization="mup"``, ``lr=...``, ``seed=...``) and how the probe forward calls the model (``loss="model"``,
    ``output=0``, ``forward_targets=True``). They are checked here: a bad one is one line before the trainer is
    made."""

    def __init__(self, width: int, out: str | Path, *, batch: object = None, steps: int | Sequence[int] | None = None,
                 tensors: Sequence[str] | None = None, module: str | None = None, **facts: Any):
        super().__init__()
        if module is not None and (not isinstance(module, str) or not module):
            raise CoordCheckError(f"module must name the LightningModule's attribute holding the network (module="
                                  f"'net'), got {module!r}")
        self.session = RecorderSession(width, out, batch=batch, steps=steps, tensors=tensors, facts=facts)
        self.module = module
        self._seen = 0  # trainer.global_step when the recorder last counted an update

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        model = self._network(pl_module)
        optimizers = trainer.optimizers
        self._seen = trainer.global_step
        planned = trainer.estimated_stepping_batches
        self.session.open(model, optimizers[0] if optimizers else None,
                          updates=planned if isinstance(planned, (int, float)) and math.isfinite(planned) else None)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        while self._seen < trainer.global_step:  # called after the optimizer's step, when this batch made one
            self._seen += 1
            self.session.step()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.session.close()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.session.close(exception)

    def _network(self, pl_module: pl.LightningModule) -> Any:
        """The module the probes hook and the probe forward calls: the LightningModule, or its ``module``."""
        if self.module is not None:
            net = getattr(pl_module, self.module, None)
            if not isinstance(net, nn.Module):
                raise CoordCheckError(f"module={self.module!r}: {type(pl_module).__name__} has no module of that name "
                                      f"(name the attribute that holds the network it trains)")
            return net
        if type(pl_module).forward is pl.LightningModule.forward:
            raise CoordCheckError(f"{type(pl_module).__name__} has no forward, which the probe forward calls on the "
                                  f"probe batch: define forward(x), or pass module='...' naming the attribute that "
                                  f"holds the network")
        return pl_module
