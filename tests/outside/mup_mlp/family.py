"""microsoft/mup's examples/MLP/main.py as an outside family: the muP MLP on CIFAR-10-shaped data (synthetic: no
download), trained by the example's own loop (its ``MLP`` with ``MuReadout``, its init, ``set_base_shapes`` from its
``width64.bsh``, ``MuSGD`` with momentum, its ``train()``), run in-process with ``runpy`` and its own argparse flags.

The vendored script talks to this module through one object, ``_cc`` (given to ``runpy.run_path`` as a global):
``_cc.cifar10_like`` (the data), ``_cc.width`` (the width its loop trains), ``_cc.mutate`` (the plant, right after
model and optimizer are built), ``_cc.start`` (enters the recorder or the :class:`Truth` hooks),
``_cc.before_forward`` / ``_cc.after_step`` (around each iteration). See ``SOURCE.md`` for the lines changed.

Flags (the example's own): relu + cross-entropy (the first combination of its loop), the README's training command
``--load_base_shapes width64.bsh`` (muP on) with its defaults (``--input_mult 1 --output_mult 1 --init_std 1 --lr 0.1
--momentum 0.9 --batch_size 64``), plus ``--epochs 1`` and ``--no_shuffle`` (the same batches at every width). (Its
docstring's optimum for relu + cross-entropy, ``--input_mult 0.00390625 --output_mult 32``, makes the first steps on
this data erratic: loss 2.3 -> 18 -> 2.3, the logits' width slope swinging -0.35..+0.45 step to step.)

The training set holds ``steps + 1`` batches: the ground truth's forward of iteration ``steps`` sees the weights
after ``steps`` updates (the last update is one more than the recorder records). The loop's loss is cross-entropy
on the logits, the recorder's default probe loss: no ``loss=`` / ``output=``. The probe batch is the first training
batch, flattened as the loop feeds it (64 x 3072), the same at every width.
"""

from __future__ import annotations

import contextlib
import io
import math
import runpy
import sys
import tempfile
from pathlib import Path

import torch

from tests.outside.common import OutsideFamily, Plant, Truth

HERE = Path(__file__).resolve().parent
VENDOR = HERE / "vendor"
MAIN = VENDOR / "main.py"
COMMIT = "19814971934ef91dd546f88e913fc963e096d11c"

BASE_WIDTH = 64  # width64.bsh
WIDTHS = (64, 128, 256, 512)
BATCH = 64  # the example's --batch_size default
LR = 0.1  # the example's --lr default
FLAGS = ["--lr", str(LR), "--momentum", "0.9", "--batch_size", str(BATCH), "--epochs", "1", "--no_shuffle",
         "--log_interval", "1"]  # --input_mult / --output_mult / --init_std: the defaults, 1.0

MUTANTS: dict[str, Plant | None] = {
    "base": None,
    "hidden_lr": Plant("lr", ("fc_2",)),  # fc_2.weight in a group of its own, lr * width/64 (MuSGD: lr)
    "input_lr": Plant("lr", ("fc_1",)),  # fc_1.weight's lr / (width/64): MuSGD's width_mult undone
    "readout_lr": Plant("lr", ("fc_3",)),  # fc_3.weight's lr / (width/64): MuSGD's width_mult undone
    "hidden_init": Plant("init", ("fc_2",)),  # fc_2.weight *= sqrt(width/64): init std constant in width
    "no_output_mult": Plant("output_multiplier", ("fc_3",)),  # MuReadout.output_mult *= width/64: no 1/width
    "readout_init": Plant("init", ("fc_3",)),  # fc_3.weight ~ N(0, 1/fan_in) beside the 1/width multiplier
}

LAST_LOG = ""  # the vendored script's printout of the last run (its losses, one line per batch)


def _own_group(optimizer: torch.optim.Optimizer, param: torch.Tensor, factor: float) -> None:
    """Move ``param`` out of its group into a group of its own, same options, lr times ``factor``."""
    for i, g in enumerate(optimizer.param_groups):
        if any(q is param for q in g["params"]):
            g["params"] = [q for q in g["params"] if q is not param]
            if not g["params"]:
                del optimizer.param_groups[i]
            optimizer.add_param_group({**{k: v for k, v in g.items() if k != "params"},
                                       "lr": g["lr"] * factor, "params": [param]})
            return
    raise KeyError("parameter not in the optimizer")


class _Hooks:
    """The ``_cc`` the vendored main.py calls."""

    def __init__(self, width: int, mutant: str, seed: int, steps: int, stack: contextlib.ExitStack,
                 out: str | Path | None = None):
        if mutant not in MUTANTS:
            raise KeyError(f"unknown mutant {mutant!r}: {sorted(MUTANTS)}")
        self.width, self.mutant, self.seed, self.steps, self.stack, self.out = width, mutant, seed, steps, stack, out
        self.mult = width / BASE_WIDTH
        self.rec = self.truth = None
        self.k = 0

    def cifar10_like(self, train: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """CIFAR-10's shapes, pixels of std about 0.56 (as CIFAR-10's after its Normalize): a fixed mean image per
        class (0.25 N(0, 1)) plus noise (0.5 N(0, 1)), the same at every width and seed (train: ``steps + 1``
        batches; test: 4)."""
        g = torch.Generator().manual_seed(0)
        means = torch.randn(10, 3, 32, 32, generator=g)
        n = (self.steps + 1) * BATCH if train else 4 * BATCH
        g.manual_seed(1 if train else 2)
        y = torch.randint(0, 10, (n,), generator=g)
        x = 0.25 * means[y] + 0.5 * torch.randn(n, 3, 32, 32, generator=g)
        return x, y

    def probe(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The first training batch, as the loop feeds it to the model (flattened)."""
        x, y = self.cifar10_like(train=True)
        return x[:BATCH].reshape(BATCH, -1), y[:BATCH]

    def mutate(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        m = self.mutant
        if m == "hidden_lr":
            _own_group(optimizer, model.fc_2.weight, self.mult)
        elif m == "input_lr":
            _own_group(optimizer, model.fc_1.weight, 1 / self.mult)
        elif m == "readout_lr":
            _own_group(optimizer, model.fc_3.weight, 1 / self.mult)
        elif m == "hidden_init":
            model.fc_2.weight.data *= math.sqrt(self.mult)
        elif m == "no_output_mult":
            model.fc_3.output_mult *= self.mult
        elif m == "readout_init":
            w = model.fc_3.weight
            w.data.normal_(0.0, w.shape[1] ** -0.5)

    def start(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if self.out is None:
            self.truth = self.stack.enter_context(Truth(model, [optimizer]))
        else:
            import coordcheck

            self.rec = self.stack.enter_context(coordcheck.record(
                model, width=self.width, out=self.out, optimizer=optimizer, batch=self.probe(), steps=self.steps,
                parametrization="mup", lr=LR, model="mup_mlp", seed=self.seed))

    def before_forward(self) -> None:
        if self.truth is not None:
            self.truth.step = self.k
        self.k += 1

    def after_step(self) -> None:
        if self.rec is not None:
            self.rec.step()
        if self.truth is not None:
            self.truth.step = None


def _train(width: int, mutant: str, seed: int, steps: int, out: str | Path | None) -> _Hooks:
    global LAST_LOG
    torch.set_num_threads(1)
    buf, argv = io.StringIO(), sys.argv
    with tempfile.TemporaryDirectory() as logs, contextlib.ExitStack() as stack:
        hooks = _Hooks(width, mutant, seed, steps, stack, out)
        sys.argv = [str(MAIN), "--load_base_shapes", str(VENDOR / "width64.bsh"), "--seed", str(seed),
                    "--log_dir", logs, *FLAGS]
        try:
            with contextlib.redirect_stdout(buf):
                runpy.run_path(str(MAIN), init_globals={"_cc": hooks}, run_name="__main__")
        finally:
            sys.argv = argv
            LAST_LOG = buf.getvalue()
    return hooks


def run(width: int, out: str | Path, mutant: str = "base", seed: int = 0, steps: int = 10) -> None:
    """One width in the example's own loop, ``coordcheck.record`` writing ``out``."""
    _train(width, mutant, seed, steps, out)


def truth(width: int, mutant: str = "base", seed: int = 0, steps: int = 10):
    """The same training with :class:`Truth`'s hooks (no coordcheck): its frame."""
    return _train(width, mutant, seed, steps, None).truth.frame()


FAMILY = OutsideFamily(
    name="mup_mlp",
    source=f"microsoft/mup@{COMMIT}: examples/MLP/main.py, examples/MLP/width64.bsh, LICENSE",
    licence="MIT",
    widths=WIDTHS,
    base_width=BASE_WIDTH,
    run=run,
    truth=truth,
    mutants=MUTANTS,
)
