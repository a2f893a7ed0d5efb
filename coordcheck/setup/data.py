"""Fixed batches for the coord check.

Stage: data. Input: the data config (sizes and a data seed). Output: a :class:`Batch`
``(inputs, targets)`` that is the same at every step (as mup's ``fix_data=True``), drawn
from its own ``torch.Generator`` so it is identical for every width and model seed and
never touches the global RNG.

Built-ins: ``tokens`` (uniform random token sequences, for the GPT), ``text`` (a real
corpus that ships with Python: the ``pydoc_data`` topic help, byte-level, so the
vocabulary is 256), ``gaussian`` (standard normal vectors with random class labels, for
the MLP). A user callable returning a ``Batch`` or an ``(inputs, targets)`` pair works too.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from coordcheck.core.errors import CoordCheckError

__all__ = ["Batch", "tokens", "text", "gaussian", "as_batch", "text_stream", "SPLITS", "HELDOUT_FRACTION"]

SPLITS = ("train", "heldout")
HELDOUT_FRACTION = 0.1  # text_stream: the corpus' last 10% is held out


@dataclass(frozen=True)
class Batch:
    """One fixed batch; ``name`` and ``policy`` go into the frame's ``data`` / ``data_policy``."""

    inputs: torch.Tensor
    targets: torch.Tensor
    name: str = "custom"
    policy: str = "fixed"  # the same batch at every step


def as_batch(obj: object, name: str = "custom") -> Batch:
    """Accept a Batch or an ``(inputs, targets)`` pair of tensors."""
    if isinstance(obj, Batch):
        return obj
    if isinstance(obj, (tuple, list)) and len(obj) == 2 and all(isinstance(t, torch.Tensor) for t in obj):
        return Batch(obj[0], obj[1], name=name)
    raise CoordCheckError(
        f"data must be a name, a Batch or an (inputs, targets) pair of tensors, got {type(obj).__name__}"
    )


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _windows(seq: torch.Tensor, batch_size: int, seq_len: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    starts = torch.randint(0, len(seq) - seq_len - 1, (batch_size,), generator=g)
    rows = torch.stack([seq[s : s + seq_len + 1] for s in starts.tolist()])  # (B, T + 1)
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


def tokens(batch_size: int = 4, seq_len: int = 32, vocab_size: int = 256, seed: int = 0) -> Batch:
    """Uniform random tokens: inputs and next-token targets, both (batch_size, seq_len) int64."""
    g = _generator(seed)
    seq = torch.randint(0, vocab_size, (batch_size, seq_len + 1), generator=g)
    return Batch(seq[:, :-1].contiguous(), seq[:, 1:].contiguous(), name="tokens")  # .view(-1) works on both


@functools.lru_cache(maxsize=1)
def _corpus() -> torch.Tensor:
    from pydoc_data.topics import topics

    corpus = "\n".join(topics[k] for k in sorted(topics)).encode("utf-8")
    return torch.frombuffer(bytearray(corpus), dtype=torch.uint8).long()


def text(batch_size: int = 4, seq_len: int = 32, vocab_size: int = 256, seed: int = 0) -> Batch:
    """Byte-level windows of Python's own help text (``pydoc_data.topics``), no download."""
    if vocab_size < 256:
        raise CoordCheckError(f"data=text is byte-level and needs model.vocab_size >= 256, got {vocab_size}")
    inputs, targets = _windows(_corpus(), batch_size, seq_len, _generator(seed))
    return Batch(inputs, targets, name="text")


def text_stream(split: str = "train", seed: int = 0, *, batch_size: int = 8, seq_len: int = 32,
                vocab_size: int = 256) -> Iterator[Batch]:
    """Fresh byte-level batches of Python's help text, forever: the learning-rate sweep's data.

    ``split="train"`` draws random windows from the first 90% of the corpus, ``"heldout"``
    from the last 10% (never trained on). The same ``seed`` gives the same batches in the
    same order, so every (width, learning rate) of a sweep sees identical data. Checked when called,
    before the first batch is drawn.
    """
    if vocab_size < 256:
        raise CoordCheckError(f"data=text is byte-level and needs model.vocab_size >= 256, got {vocab_size}")
    if split not in SPLITS:
        raise CoordCheckError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return _text_stream(split, seed, batch_size, seq_len)


def _text_stream(split: str, seed: int, batch_size: int, seq_len: int) -> Iterator[Batch]:
    """The batches of :func:`text_stream` (a generator: its body runs at the first ``next``)."""
    seq = _corpus()
    cut = int(len(seq) * (1 - HELDOUT_FRACTION))
    seq = seq[:cut] if split == "train" else seq[cut:]
    g = _generator(seed)
    while True:
        inputs, targets = _windows(seq, batch_size, seq_len, g)
        yield Batch(inputs, targets, name="text", policy="fresh")


def gaussian(batch_size: int = 64, dim: int = 32, n_classes: int = 10, seed: int = 0) -> Batch:
    """Standard normal vectors (batch_size, dim) float32 with random labels (batch_size,) int64."""
    g = _generator(seed)
    x = torch.randn(batch_size, dim, generator=g)
    y = torch.randint(0, n_classes, (batch_size,), generator=g)
    return Batch(x, y, name="gaussian")
