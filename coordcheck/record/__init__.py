"""What is recorded: the probes on a training model (activations, their change, a module's input and own update,
attention logits wherever computed), the moments they reduce to, where each module sits (layout), parameter shapes
and facts, and Adam's ε. Imports :mod:`coordcheck.setup` and :mod:`coordcheck.core`; :mod:`~coordcheck.record.shapes`
alone is torch-free (the judge reads it).

This package is itself callable — ``coordcheck.record(model, width=..., out=...)`` is the recorder for any training
loop, :func:`coordcheck.run.recorder.record` — and loads the recorder only when called.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module


class _CallableModule(types.ModuleType):
    """``import coordcheck; with coordcheck.record(model, width=w, out=...) as rec:`` works whether
    ``coordcheck.record`` names this package or the function."""

    def __call__(self, model, /, **kwargs):
        return import_module("coordcheck.run.recorder").record(model, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
