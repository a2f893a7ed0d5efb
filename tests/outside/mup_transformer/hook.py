"""What the vendored ``vendor/main.py`` calls at its ``# coordcheck`` lines (see SOURCE.md).

The family (``family.py``) runs ``main.py`` as a subprocess with its own argparse flags and passes what is not a flag
of the example in the environment variable ``MUP_TRANSFORMER_CC`` (JSON): ``mode`` (``record`` | ``truth``; absent:
the hooks do nothing and ``main.py`` trains as its authors run it), ``out`` (the run's directory, or the truth frame's
parquet file), ``steps`` (the steps to record), ``mutant`` (a plant of :data:`MUTATE`; those the example has a flag for
are passed as flags by the family).

``truth`` mode imports nothing of coordcheck: only :class:`tests.outside.common.Truth`.
"""

from __future__ import annotations

import json
import math
import os

import torch

torch.set_num_threads(1)  # two cores, shared

CONF = json.loads(os.environ.get("MUP_TRANSFORMER_CC", "{}"))

EPS = 1e-3  # the "eps" plant: Adam's eps at every width (the example's is torch's 1e-8)


def _width_mult(model) -> float:
    """width / base width, from the base shapes main.py loaded (its own ``set_base_shapes``)."""
    return model.encoder.weight.infshape.width_mult()


def _own_group(optimizer, p, factor: float) -> None:
    """Move ``p`` out of the group MuAdam put it in, into a group of its own with that group's lr times ``factor``."""
    for g in optimizer.param_groups:
        if any(q is p for q in g["params"]):
            g["params"] = [q for q in g["params"] if q is not p]
            optimizer.add_param_group({**{k: v for k, v in g.items() if k != "params"}, "params": [p],
                                       "lr": g["lr"] * factor})
            return
    raise KeyError("parameter not in the optimizer")


def _lr_hidden(model, optimizer, wm):  # one hidden matrix's lr not divided by width_mult: times wm undoes MuAdam's
    _own_group(optimizer, model.transformer_encoder.layers[0].linear2.weight, wm)


def _lr_embedding(model, optimizer, wm):  # the embedding's lr divided by width_mult like a hidden matrix's
    _own_group(optimizer, model.encoder.weight, 1 / wm)


def _init_hidden(model, optimizer, wm):  # one hidden matrix's init std constant in width: times sqrt(wm) after init
    with torch.no_grad():
        model.transformer_encoder.layers[1].linear1.weight.mul_(math.sqrt(wm))


def _eps(model, optimizer, wm):  # Adam's eps too large at every width
    for g in optimizer.param_groups:
        g["eps"] = EPS


MUTATE = {"lr_hidden": _lr_hidden, "lr_embedding": _lr_embedding, "init_hidden": _init_hidden, "eps": _eps}


def mutate(args, model, optimizer) -> None:
    """Called by main.py right after the model (set_base_shapes done, its own init) and the optimizer are built."""
    fn = MUTATE.get(CONF.get("mutant", "base"))
    if fn is not None:
        fn(model, optimizer, _width_mult(model))


class _Nothing:
    def step(self):
        pass

    def __exit__(self, *exc):
        pass


class _TruthRun:
    """Truth's hooks in place of the recorder: ``truth.step = k`` before the forward of iteration k (k = 0..steps;
    the family trains steps + 1 iterations), none after; the frame written to ``out`` when the loop ends."""

    def __init__(self, model, optimizer, steps: int, out: str):
        from tests.outside.common import Truth

        self.truth, self.k, self.steps, self.out = Truth(model, [optimizer]).__enter__(), 0, steps, out
        self.truth.step = 0

    def step(self):
        self.k += 1
        self.truth.step = self.k if self.k <= self.steps else None

    def __exit__(self, *exc):
        self.truth.__exit__(*exc)
        self.truth.frame().to_parquet(self.out)


def enter(args, model, optimizer, train_data):
    """Called by main.py before its training loop: the recorder (or Truth's hooks) entered on the model it trains."""
    mode = CONF.get("mode")
    if mode == "truth":
        return _TruthRun(model, optimizer, CONF.get("steps", 10), CONF["out"])
    if mode != "record":
        return _Nothing()
    import coordcheck

    # the probe batch: main.py's first batch, get_batch(train_data, 0, bptt) with the targets (bptt, batch) unflattened;
    # the same at every width (the corpus does not depend on the width). The model is sequence-first and model(inputs)
    # makes its own causal mask (has_mask=True), returns log-probabilities (bptt, batch, ntokens): the recorder's
    # default loss, the cross-entropy of the output, is main.py's NLLLoss of them. No call options needed.
    batch = (train_data[:args.bptt], train_data[1:1 + args.bptt])
    return coordcheck.record(model, width=args.d_model, out=CONF["out"], optimizer=optimizer, batch=batch,
                             steps=CONF.get("steps", 10), parametrization="mup", lr=args.lr, model="mup_transformer",
                             seed=args.seed).__enter__()
