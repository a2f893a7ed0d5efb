"""Fixed batches for the coord check.

Stage: data. Input: the data config (sizes and a data seed). Output: a :class:`Batch`
``(inputs, targets)`` that is the same at every step (as mup's ``fix_data=True``), drawn
from its own ``torch.Generator`` so it is identical for every width and model seed and
never touches the global RNG.

Built-ins: ``tokens`` (uniform random token sequences, for the GPT), ``text`` (a real
corpus that ships with Python: the ``pydoc_data`` topic help, byte-level, so the
vocabulary is 256), ``gaussian`` (standard normal vectors with random class labels, for
the MLP). A user callable returning a ``Batch`` or an ``(inputs, targets)`` pair works too.

No data given: :func:`batch_for` reads it off the model — its first layer says what it takes (an
embedding: tokens of its vocabulary; a linear layer: gaussian vectors of its fan-in; a convolution:
gaussian images with its input channels), its last linear layer how many classes the targets have.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from coordcheck.core.errors import CoordCheckError

__all__ = ["Batch", "tokens", "text", "gaussian", "images", "as_batch", "batch_for", "text_stream", "SPLITS",
           "HELDOUT_FRACTION"]

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


def images(batch_size: int = 8, channels: int = 3, size: int = 16, n_classes: int = 10, seed: int = 0) -> Batch:
    """Standard normal images (batch_size, channels, size, size) float32 with random labels (batch_size,) int64."""
    g = _generator(seed)
    x = torch.randn(batch_size, channels, size, size, generator=g)
    y = torch.randint(0, n_classes, (batch_size,), generator=g)
    return Batch(x, y, name="gaussian")


_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def batch_for(model: nn.Module) -> tuple[Batch, str]:
    """The batch a model takes, read off its layers (it may live on the meta device), and one line that says so.

    The first module that owns a weight decides the inputs: an ``nn.Embedding`` -> :func:`tokens` of its
    vocabulary (sequences of 32, fewer when another embedding, a position table, has fewer rows); an
    ``nn.Linear`` -> :func:`gaussian` vectors of its ``in_features``; an ``nn.Conv2d`` -> :func:`images` with its
    input channels. The last ``nn.Linear`` (a readout, ``MuReadout`` too) gives the
    number of classes of the targets (an embedding model: its vocabulary). Anything else: a one-line error that says
    to pass ``data=``."""
    owners = [(n, m) for n, m in model.named_modules() if next(m.parameters(recurse=False), None) is not None]
    if not owners:
        raise CoordCheckError("no data given and the model has no parameters to read its inputs off: pass data= "
                              "(a name or an (inputs, targets) batch)")
    name, first = owners[0]
    layers = [(n, m) for n, m in owners if isinstance(m, (nn.Embedding, nn.Linear))]
    readouts = [m for _, m in layers if isinstance(m, nn.Linear)]
    n_classes = readouts[-1].out_features if readouts else None
    if isinstance(first, nn.Embedding):
        rows = [m.num_embeddings for _, m in layers[1:] if isinstance(m, nn.Embedding)]
        seq_len = min([32, *rows])
        vocab = first.num_embeddings
        if n_classes is not None and n_classes < vocab:
            vocab = n_classes  # targets must be classes the readout has
        return (tokens(seq_len=seq_len, vocab_size=vocab),
                f"tokens in the vocabulary of '{name}' ({vocab}), 4 sequences of {seq_len}")
    if isinstance(first, nn.Linear):
        classes = n_classes or 10
        return (gaussian(dim=first.in_features, n_classes=classes),
                f"64 gaussian vectors of the fan-in of '{name}' ({first.in_features}), {classes} classes")
    classes = n_classes or 10
    if isinstance(first, nn.Conv2d):
        return (images(channels=first.in_channels, n_classes=classes),
                f"8 gaussian 16x16 images with the {first.in_channels} input channels of '{name}', {classes} classes")
    raise CoordCheckError(f"no data given and the model's first layer '{name or '(root)'}' is a "
                          f"{type(first).__name__}, which coordcheck cannot read inputs off: pass data= (a name or an "
                          f"(inputs, targets) batch)")
