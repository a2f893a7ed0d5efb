"""The model, batch and settings the DDP test and its torchrun job share."""

import torch
from torch import nn

from coordcheck.setup.data import Batch

SETTINGS = dict(widths=[64, 128, 256], steps=3, seeds=1, progress=False, cause_pass=False, optimizer="adam", lr=1e-2,
                tensors=["out", "delta", "in", "own"],
                device="cpu")


class MLP(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        from mup import MuReadout

        self.fc1 = nn.Linear(16, width)
        self.fc2 = nn.Linear(width, width)
        self.readout = MuReadout(width, 4)

    def forward(self, x):
        return self.readout(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def build(width: int) -> nn.Module:
    return MLP(width)


def BATCH() -> Batch:
    g = torch.Generator().manual_seed(0)
    return Batch(torch.randn(16, 16, generator=g), torch.randint(0, 4, (16,), generator=g), "gaussian")


def dying_build(width: int) -> nn.Module:
    """``build``, but the process of rank 1 dies (``os._exit``: no handler runs) when it builds width 512 while
    ``COORDCHECK_TEST_DIE`` is set: a process lost mid-sweep (muP's base shapes build widths 128 and 256)."""
    import os

    if width == 512 and os.environ.get("RANK") == "1" and os.environ.get("COORDCHECK_TEST_DIE"):
        os._exit(3)
    return MLP(width)


class SequenceFirst(nn.Module):
    """Sequence-first inside (``(T, B, D)``, as ``nn.Transformer``'s default): the leading dimension of its layers'
    inputs is time, which the batch's split does not divide — every process samples its own first time steps."""

    def __init__(self, width: int):
        super().__init__()
        from mup import MuReadout

        self.fc1 = nn.Linear(16, width)
        self.fc2 = nn.Linear(width, width)
        self.readout = MuReadout(width, 4)

    def forward(self, x):  # x: (B, T, 16) -> logits (B, 4) from the last time step
        h = torch.relu(self.fc2(torch.relu(self.fc1(x.transpose(0, 1)))))
        return self.readout(h[-1])


def sequence_first(width: int) -> nn.Module:
    return SequenceFirst(width)


def SEQUENCE_BATCH() -> Batch:
    g = torch.Generator().manual_seed(1)
    return Batch(torch.randn(16, 12, 16, generator=g), torch.randint(0, 4, (16,), generator=g), "gaussian")


MODELS = {"mlp": (build, BATCH), "sequence_first": (sequence_first, SEQUENCE_BATCH)}
