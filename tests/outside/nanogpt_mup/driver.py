"""Runs the vendored ``vendor/train.py`` once, in this process (started as a subprocess by ``family.py``):
``python driver.py '<json spec>'``.

The spec says the mode (``record``: ``coordcheck.record``; ``truth``: :class:`tests.outside.common.Truth`, coordcheck
never imported), the mutant, the data directory and the ``--key=value`` overrides of train.py. train.py runs with
``runpy`` in ``vendor/`` (it reads ``configurator.py`` by a relative path and imports ``model``), with three names
put into its globals, the ones its ``# coordcheck`` lines use:

* ``coordcheck_record(raw_model, **kw)``: ``coordcheck.record`` (record), or a stand-in with the same call that
  enters :class:`Truth` on the model and optimizer and sets ``truth.step = k`` after the k-th update, i.e. before
  the forward of iteration k (truth);
* ``coordcheck_batch``: the probe batch, the first 4 windows of ``val.bin`` (the same at every width);
* ``coordcheck_mutate(model, optimizer)``: the mutant's plant applied right after the model and the optimizer are
  built (nothing for the base and for the plants train.py has a config knob of its own for).
"""

from __future__ import annotations

import json
import math
import os
import runpy
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
VENDOR = HERE / "vendor"
ROOT = HERE.parents[2]  # the repository: tests.outside.common

HIDDEN = tuple(f"transformer.h.{i}.{m}.weight" for i in range(2)
               for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"))
EPS_HIDDEN = 1e-3  # the eps plants: Adam's eps of the hidden matrices' group, 1e-3 (from 1e-8), or 1e-3 * width/64


def _group_of(optimizer: torch.optim.Optimizer, p: torch.Tensor) -> dict:
    return next(g for g in optimizer.param_groups if any(q is p for q in g["params"]))


def _move(optimizer: torch.optim.Optimizer, p: torch.Tensor, **changes: float) -> None:
    """``p`` out of its group into a group of its own: every other key of its group kept, ``changes`` set."""
    group = _group_of(optimizer, p)
    group["params"] = [q for q in group["params"] if q is not p]
    optimizer.param_groups.append({**group, "params": [p], **changes})
    optimizer.param_groups[:] = [g for g in optimizer.param_groups if g["params"]]


def mutate(name: str):
    """The plant ``name`` as a function of (model, optimizer), applied once both are built."""
    @torch.no_grad()
    def apply(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        m = float(model.config.mup_width_multiplier)
        named = dict(model.named_parameters())
        if name == "hidden_lr_unscaled":  # one hidden matrix in a group of lr_scale 1 (muP's: 1/m)
            _move(optimizer, named["transformer.h.0.mlp.c_fc.weight"], lr_scale=1.0)
        elif name == "embedding_lr_scaled":  # the (tied) token embedding's lr scaled 1/m like a hidden matrix
            _move(optimizer, named["transformer.wte.weight"], lr_scale=1.0 / m)
        elif name == "position_lr_scaled":  # the position embedding's lr scaled 1/m like a hidden matrix
            _move(optimizer, named["transformer.wpe.weight"], lr_scale=1.0 / m)
        elif name == "hidden_init_constant":  # init std 0.02 at every width (muP's: 0.02/sqrt(m))
            named["transformer.h.1.mlp.c_fc.weight"].mul_(math.sqrt(m))
        elif name in ("eps_large", "eps_grows"):  # the hidden matrices' group: Adam's eps 1e-3 (times m)
            group = _group_of(optimizer, named[HIDDEN[0]])
            assert all(any(q is named[h] for q in group["params"]) for h in HIDDEN)
            group["eps"] = EPS_HIDDEN * (m if name == "eps_grows" else 1.0)
        elif name not in ("base", "no_output_multiplier", "attention_sqrt", "all_hidden_lr_unscaled"):
            raise ValueError(f"unknown mutant {name!r}")
    return apply


def probe_batch(data_dir: str, block_size: int, rows: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    val = np.fromfile(os.path.join(data_dir, "val.bin"), dtype=np.uint16).astype(np.int64)
    t = torch.from_numpy(val[: rows * (block_size + 1)].copy()).view(rows, block_size + 1)
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


class _TruthRecord:
    """``coordcheck.record``'s call, with :class:`Truth` behind it: its step hooks on the optimizer, ``truth.step``
    set to 0 on entering and to k after the k-th update (the forward of iteration k follows)."""

    def __init__(self, module, *, optimizer, out: Path, steps: int):
        from tests.outside.common import Truth
        self.truth, self.out, self.updates, self.steps = Truth(module, [optimizer]), out, 0, steps

    def __enter__(self):
        self.truth.__enter__()
        self.truth.step = 0
        return self

    def step(self) -> None:
        self.updates += 1
        self.truth.step = self.updates if self.updates <= self.steps else None  # steps 0..steps, as the recorder

    def __exit__(self, *exc) -> None:
        self.truth.__exit__(*exc)
        assert "coordcheck" not in sys.modules, "the ground truth must not import coordcheck"
        self.truth.frame().to_pickle(self.out)


def main(spec: dict) -> None:
    torch.set_num_threads(1)
    sys.path[:0] = [str(VENDOR), str(ROOT)]
    os.chdir(VENDOR)
    opened = []

    if spec["mode"] == "record":
        import coordcheck

        def open_record(module, /, **kw):
            opened.append(coordcheck.record(module, **kw))
            return opened[-1]
    else:
        def open_record(module, /, **kw):
            opened.append(_TruthRecord(module, optimizer=kw["optimizer"], out=Path(spec["truth_out"]),
                                       steps=kw["steps"]))
            return opened[-1]

    inject = dict(coordcheck_record=open_record, coordcheck_mutate=mutate(spec["mutant"]),
                  coordcheck_batch=probe_batch(spec["data_dir"], spec["block_size"]))
    sys.argv = [str(VENDOR / "train.py"), *spec["argv"]]
    try:
        runpy.run_path(str(VENDOR / "train.py"), init_globals=inject, run_name="__main__")
    except BaseException as e:
        if opened:  # close the run with the error (coordcheck: status stopped)
            opened[-1].__exit__(type(e), e, e.__traceback__)
        raise


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
