"""The model, batch and settings the DDP test and its torchrun job share."""

import torch
from torch import nn

from coordcheck.setup.data import Batch

SETTINGS = dict(widths=[64, 128, 256], steps=3, seeds=1, progress=False, optimizer="adam", lr=1e-2,
                tensors=["out", "delta", "in", "own"],
                device="cpu")


class OwnLinear(nn.Module):
    """A linear layer written as people write routers and fused layers: ``F.linear`` on its own weight (no
    ``nn.Linear``): its op is known only from what it computes (under FSDP2, on the unsharded weight it swaps in)."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in) / n_in**0.5)

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight)


class MLP(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        from mup import MuReadout

        self.fc1 = nn.Linear(16, width)
        self.fc2 = OwnLinear(width, width)
        self.readout = MuReadout(width, 4)

    def forward(self, x):
        return self.readout(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def build(width: int) -> nn.Module:
    return MLP(width)


def BATCH() -> Batch:
    g = torch.Generator().manual_seed(0)
    return Batch(torch.randn(16, 16, generator=g), torch.randint(0, 4, (16,), generator=g), "gaussian")


class Faulty(MLP):
    """The MLP, but on rank 1 its third forward fails as ``COORDCHECK_TEST_FAULT`` says: ``exit`` (the process ends
    at once, ``os._exit``: no handler runs, as under SIGKILL or the out-of-memory killer), ``oom`` (CUDA's
    out-of-memory error, as PyTorch raises it) or ``hang`` (it sleeps far past the process group's timeout)."""

    calls = 0

    def forward(self, x):
        import os
        import time

        self.calls += 1
        fault = os.environ.get("COORDCHECK_TEST_FAULT")
        if self.calls == 3 and os.environ.get("RANK") == "1" and fault:
            if fault == "exit":
                os._exit(3)
            if fault == "oom":
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (GPU 1; 79.15 GiB total "
                                             "capacity)")
            if fault == "hang":
                time.sleep(600)
        return super().forward(x)


def dying_build(width: int) -> nn.Module:
    """``build``, with a fault on rank 1 at width 512 (:class:`Faulty`; muP's base shapes build widths 128 and 256)."""
    return Faulty(width) if width == 512 else MLP(width)


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


class Routed(nn.Module):
    """Top-1 routing to experts that get only their tokens (``x[chosen == e]``) and are not called when none is
    routed to them, as Hugging Face's Mixtral loops over the experts hit: the number of rows an expert sees, and
    whether it runs at all, differ between processes. Expert 3's router column is pushed down, so that it gets few
    tokens: none on some processes at some steps."""

    def __init__(self, width: int):
        super().__init__()
        from mup import MuReadout

        self.fc1 = nn.Linear(16, width)
        self.router = nn.Linear(width, 4, bias=False)
        with torch.no_grad():
            self.router.weight[3] -= 0.15
        self.experts = nn.ModuleList(nn.Linear(width, width) for _ in range(4))
        self.readout = MuReadout(width, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        gate = torch.softmax(self.router(h), dim=-1)
        chosen = gate.argmax(dim=-1)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            rows = (chosen == e).nonzero().squeeze(1)
            if rows.numel():
                out[rows] = expert(h[rows]) * gate[rows, e : e + 1]
        return self.readout(torch.relu(out))


def routed(width: int) -> nn.Module:
    return Routed(width)


MODELS = {"mlp": (build, BATCH), "sequence_first": (sequence_first, SEQUENCE_BATCH), "routed": (routed, BATCH)}

# muP by hand (no Mu* optimizer, no mup init): muP's learning rates as plain AdamW groups, hidden matrices at
# std ∝ fan_in^-1/2 (coordcheck.setup.optim.mup_groups, coordcheck.setup.init.mup_init)
# eps: Adam's ε fraction (tensors=eps) with an ε large enough to matter on some coordinates of every matrix


def adam_large_eps(model: nn.Module, lr: float):
    from mup import MuAdam

    return MuAdam(model.parameters(), lr=lr, eps=1e-4)


VARIANTS = {"mup": {}, "by_hand": {"optimizer": "mup_groups", "init": "mup"},
            "eps": {"tensors": ["out", "delta", "eps"], "optimizer": adam_large_eps}}
