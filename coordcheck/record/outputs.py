"""Outputs: the tensor to measure in what a module or a model returns.

Stage: record (shared by the probes, the own update, the training loop and the gradient-flow probe). Input: a
module's output — a tensor, a tuple / list / dict of them, or an output object (a Hugging Face ``ModelOutput``).
Output: the first floating-point tensor in it (:func:`first_tensor`), the part ``output=`` selects
(:func:`select_output`), or for the model's own output the logits to measure (:func:`root_output`: nothing when the
model returned its loss alone; then the probes' :class:`LossLogits` hooks record the loss's input as ``(logits)``).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from coordcheck.core.errors import CoordCheckError

__all__ = ["first_tensor", "select_output", "is_bare_loss", "root_output", "LOGITS_MODULE", "LossLogits"]

LOGITS_MODULE = "(logits)"  # the input of a model's final (log_)softmax or loss, when no module returns it


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


def _same(x: torch.Tensor, y: object) -> bool:
    """Whether ``x`` is ``y`` or a view of all of it (``logits.view(-1, V)``)."""
    if x is y:
        return True
    if not isinstance(y, torch.Tensor) or x.numel() != y.numel() or y.numel() == 0:
        return False
    try:
        return x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # a tensor subclass without storage (a DTensor): not known the same
        return False


class LossLogits:
    """The probes' hooks for a model that returns its loss alone (a mixin of :class:`coordcheck.record.probes.Probes`,
    whose state they read and write): the first loss function's input, recorded as ``(logits)`` when the root
    returns."""

    def loss_input(self, x: torch.Tensor) -> None:
        """A loss function was called on ``x`` in the forward; the first call's input is kept until the root returns
        (:meth:`_loss_logits`), with what it is: the latest module's output (a readout's logits), the latest softmax's
        output (``nll_loss`` after ``log_softmax``) — either as it is or a view of it — or neither."""
        if self._loss_in is not None:
            return
        if _same(x, self._last_out):
            self._loss_in = (x, "readout", None)
        elif self._softmax_out is not None and _same(x, self._softmax_out[0]):
            self._loss_in = (x, "softmax", self._softmax_out[1])
        else:
            self._loss_in = (x, "", None)

    def _loss_logits(self) -> None:
        """The root returned its loss alone: record the logits the loss was computed from as ``(logits)`` (role
        ``output``) — unless they are the readout's output, already recorded, or a softmax's output, whose input is the
        logits (renamed ``(logits)`` as for a model that ends in a softmax)."""
        found, self._loss_in = self._loss_in, None
        if found is None:
            return  # a loss written by hand: the readout module's output is the model's last measured output
        x, kind, capture = found
        self._functions_seen = True  # the record depends on the function probe at every step
        if kind == "softmax":
            self._ends_in_softmax(capture)
        elif kind != "readout":
            self._capture_ops.setdefault(LOGITS_MODULE, "logits")
            grad = torch.is_grad_enabled()
            torch._C._set_grad_enabled(False)
            try:
                with torch._C.DisableTorchFunction():
                    self._record(LOGITS_MODULE, x)
            finally:
                torch._C._set_grad_enabled(grad)
