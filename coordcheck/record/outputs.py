"""Outputs: the tensor to measure in what a module or a model returns.

Stage: record (shared by the probes, the own update, the training loop and the gradient-flow probe). Input: a
module's output — a tensor, a tuple / list / dict of them, or an output object (a Hugging Face ``ModelOutput``).
Output: the first floating-point tensor in it (:func:`first_tensor`), the part ``output=`` selects
(:func:`select_output`), or for the model's own output the logits to measure (:func:`root_output`: nothing when the
model returned its loss alone).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from coordcheck.core.errors import CoordCheckError

__all__ = ["first_tensor", "select_output", "is_bare_loss", "root_output"]


def first_tensor(out: object) -> torch.Tensor | None:
    """The first floating-point tensor in a (nested) tuple / list / dict output, else None; the ``logits`` of an
    output object that has them (a Hugging Face ``ModelOutput``, whose first value is the loss when labels are
    given)."""
    if isinstance(out, torch.Tensor):
        return out if out.is_floating_point() else None
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor) and logits.is_floating_point():
        return logits
    if isinstance(out, Mapping):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        for item in out:
            t = first_tensor(item)
            if t is not None:
                return t
    return None


def select_output(out: object, output: int | str | None) -> object:
    """``out[output]`` (an index into a tuple/list, a key of a dict, or an attribute), or ``out`` for None."""
    if output is None:
        return out
    try:
        if isinstance(output, str) and not isinstance(out, Mapping):
            return getattr(out, output)
        return out[output]
    except (KeyError, IndexError, TypeError, AttributeError):
        kind = f"keys {list(out)}" if isinstance(out, Mapping) else (
            f"{len(out)} items" if isinstance(out, (tuple, list)) else type(out).__name__)
        raise CoordCheckError(f"output={output!r} selects nothing in the model's output ({kind}): "
                              f"set output= to the index or key of the logits") from None


def is_bare_loss(out: object) -> bool:
    """Whether a model's output is one number: its loss alone (nanochat's ``forward(idx, targets)``), not logits."""
    return isinstance(out, torch.Tensor) and out.numel() == 1


def root_output(out: object, output: int | str | None) -> torch.Tensor | None:
    """The tensor to measure in the model's own output: the part ``output=`` selects (its first floating-point
    tensor), or None when the model returned its loss alone — the readout module's output holds the logits then."""
    return None if is_bare_loss(out) else first_tensor(select_output(out, output))
