"""u-μP, as Graphcore's ``unit-scaling`` library (PyPI ``unit-scaling==0.3.5``) trains it: the u-μP transformer and
the training loop of the library's demo notebook (``examples/demo.ipynb``: ``UmupTransformerDecoder``,
``run_experiment``), vendored in ``vendor/demo.py`` with the lines changed marked ``# coordcheck`` (``SOURCE.md``).

The notebook's settings are its module's globals and are set here as a user sets them in its settings cell: 2 layers
(``depth``), a fixed head size of 64 (the notebook's ``head_size``: the number of heads grows with width, 1 at width
64), ``mlp_expansion=2``, byte vocabulary 256, ``batch_size=8``, ``sequence_length=32``, ``n_steps=steps``,
``warmup_steps=0`` (the notebook's warm-up from lr 0 would make the first update zero in a 10-step run: its cosine
decay over ``n_steps`` is kept), no ``torch.compile``, CPU. The optimizer is the notebook's ``uu.optim.AdamW`` at
``lr=1.0`` (the best u-μP lr of the notebook's sweep at both widths, 128 and 512), which scales each parameter's lr
by ``lr_scale_func_adam``: hidden weights ``fan_in^-1/2`` (and ``depth^-1/2``), the embedding ``width^-1/2`` (its
"fan_in" is its width), the readout 1. The data is synthetic bytes (a fixed Markov chain, nothing downloaded),
sampled by the notebook's own ``batches()`` from a generator seeded by ``seed``, so every width sees the same batches.

The vendored loop calls four names this module sets before each run: ``plant_model(model)`` and
``plant_optimizer(model, opt)`` (a mutant's one knob; nothing for ``base``), ``recorder(model, opt)`` (the recorder's
``with`` block opened before the loop, ``.step()`` after each ``run_step`` — its ``opt.step()`` and
``schedule.step()`` — and ``.close()`` after the loop) and ``data``/``data_rng`` (the corpus and the sampler's
generator). The ground truth path (:func:`truth`) opens :class:`tests.outside.common.Truth` there instead and never
imports coordcheck.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from tests.outside.common import OutsideFamily, Plant, Truth

HERE = Path(__file__).resolve().parent
COMMIT = "ecbc6c73fba3585b19c1fe8f3818f16026154201"  # tag v0.3.5 = PyPI unit-scaling 0.3.5
WIDTHS = (64, 128, 256)
BASE_WIDTH = 64  # u-μP has no base width; the plants are 1 at this width
LR = 1.0
SETTINGS = dict(depth=2, head_size=64, mlp_expansion=2, vocab_size=256, warmup_steps=0, batch_size=8,
                sequence_length=32, compile=False)
EPS_AT_BASE = 0.1  # the eps plant: Adam's eps = 0.1 * width / 64 (the library's default: torch's 1e-8)

# The base trains the embedding at muP's rule (a constant lr: Tensor Programs V, Table 3). The notebook's own u-μP
# rule gives it lr ∝ width^-1/2 (the u-μP paper's "new embedding LR rule", a deliberate departure from muP): measured
# here, the embedding's change since step 0 then shrinks like width^-0.50 at every step, and so does the first
# block's norm's: the coordinate check fails it, naming the embedding's lr (the mutant "authors_embedding_rule").
MUTANTS: dict[str, Plant | None] = {
    "base": None,
    # the notebook as published: the embedding's lr ∝ width^-1/2 (u-μP's rule, not muP's)
    "authors_embedding_rule": Plant("lr", ("embedding",)),
    # layers.0.mlp_up.weight's lr times sqrt(width/64): constant in width, u-μP's fan_in^-1/2 undone
    "hidden_lr": Plant("lr", ("layers.0.mlp_up",)),
    # embedding.weight's lr times sqrt(64/width): ∝ 1/width (mup's hidden-matrix rule), not u-μP's width^-1/2
    "embedding_lr": Plant("lr", ("embedding",)),
    # layers.0.attn_out.weight times sqrt(width/64) after init: std ∝ width^+1/2, not 1
    "hidden_init": Plant("init", ("layers.0.attn_out",)),
    # the readout as a plain u-μP Linear: uu.Linear(width, 256, constraint=None, weight_mup_type="output"), i.e.
    # LinearReadout with its forward scale 1/sqrt(fan_in) instead of 1/fan_in (its lr rule and backward unchanged)
    "readout_scale": Plant("output_multiplier", ("projection",)),
    # every group's Adam eps = 0.1 * width/64 (u-μP's gradients are unit-scaled, rms 0.6-1.6 at every width: a
    # constant eps would not depend on width, so the plant grows): every module with a parameter
    "eps": Plant("eps", ("embedding", *(f"layers.{i}.{m}" for i in range(2)
                                        for m in ("attn_qkv", "attn_out", "mlp_up", "mlp_gate", "mlp_down")),
                         "projection")),
}


def _demo():
    """The vendored notebook code, loaded once (its module-level settings are overwritten per run)."""
    name = "_coordcheck_outside_u_mup_demo"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "vendor" / "demo.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def corpus(n: int = 1 << 16) -> torch.Tensor:
    """Synthetic bytes with structure: a first-order Markov chain in which each byte has 4 successors (fixed)."""
    rng = np.random.default_rng(1234)
    succ = rng.integers(0, 256, size=(256, 4))
    pick = rng.integers(0, 4, size=n)
    out = np.empty(n, dtype=np.uint8)
    b = 0
    for t in range(n):
        out[t] = b = succ[b, pick[t]]
    return torch.from_numpy(out)


_CORPUS: torch.Tensor | None = None


def _corpus() -> torch.Tensor:
    global _CORPUS
    if _CORPUS is None:
        _CORPUS = corpus()
    return _CORPUS


def probe_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """One fixed batch (4 sequences of 32 bytes and their next bytes), the same at every width and seed."""
    data, L = _corpus(), SETTINGS["sequence_length"]
    starts = torch.randint(0, len(data) - L - 1, (4,), generator=torch.Generator().manual_seed(99))
    tokens = torch.stack([data[i:i + L + 1].long() for i in starts])
    return tokens[:, :-1], tokens[:, 1:]


def _plants(mutant: str, width: int):
    assert mutant in MUTANTS, mutant
    up, down = math.sqrt(width / BASE_WIDTH), math.sqrt(BASE_WIDTH / width)

    def plant_model(model):
        if mutant == "hidden_init":
            with torch.no_grad():
                model.layers[0].attn_out.weight.mul_(up)
        if mutant == "readout_scale":
            model.projection = _demo().uu.Linear(width, SETTINGS["vocab_size"], constraint=None,
                                                 weight_mup_type="output")
        return model

    def plant_optimizer(model, opt):
        names = {id(p): n for n, p in model.named_parameters()}
        for group in opt.param_groups:  # uu.optim makes one group per parameter
            name = names[id(group["params"][0])]
            if mutant == "hidden_lr" and name == "layers.0.mlp_up.weight":
                group["lr"] = group["lr"] * up
            if name == "embedding.weight" and mutant not in ("authors_embedding_rule", "embedding_lr"):
                group["lr"] = group["lr"] * up  # muP's embedding rule: constant in width (the notebook's × sqrt(w/64))
            if mutant == "embedding_lr" and name == "embedding.weight":
                group["lr"] = group["lr"] * down
            if mutant == "eps":
                group["eps"] = EPS_AT_BASE * width / BASE_WIDTH

    return plant_model, plant_optimizer


def _train(width: int, mutant: str, seed: int, steps: int, recorder) -> pd.DataFrame:
    """The notebook's ``run_experiment("u-μP", width, lr)`` with the settings above; returns its loss log."""
    demo = _demo()
    for k, v in SETTINGS.items():
        setattr(demo, k, v)
    demo.n_steps = steps
    demo.device = torch.device("cpu")
    demo.data = _corpus()
    demo.data_rng = torch.Generator().manual_seed(seed)
    demo.plant_model, demo.plant_optimizer = _plants(mutant, width)
    demo.recorder = recorder
    torch.manual_seed(seed)
    return demo.run_experiment("u-μP", width, LR)


class _Block:
    """A ``with`` block opened where the loop starts and closed where it ends (or on an exception: :func:`_run`)."""

    def __init__(self, cm):
        self.cm, self.open = cm, True
        self.rec = cm.__enter__()

    def step(self) -> None:
        self.rec.step()

    def close(self, exc: BaseException | None = None) -> None:
        if self.open:
            self.open = False
            self.cm.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)


def run(width: int, out, mutant: str = "base", seed: int = 0, steps: int = 10) -> pd.DataFrame:
    """Train ``width`` in the notebook's loop with ``coordcheck.record`` writing the job directory ``out``."""
    import coordcheck

    blocks: list[_Block] = []

    def recorder(model, opt):
        blocks.append(_Block(coordcheck.record(model, width=width, out=out, optimizer=opt, batch=probe_batch(),
                                               steps=steps, parametrization="none", lr=LR, model="u_mup",
                                               seed=seed)))
        return blocks[-1]

    try:
        return _train(width, mutant, seed, steps, recorder)
    except BaseException as e:
        for b in blocks:
            b.close(e)
        raise


class _TruthBlock:
    """:class:`Truth` where the recorder would be: step k is the training forward of iteration k (after k updates);
    the step after the last update is one more forward (no grad) of the batch the sampler gives next."""

    def __init__(self, model, opt, steps: int):
        self.model, self.steps, self.k = model, steps, 0
        self.truth = Truth(model, [opt]).__enter__()
        self.truth.step = 0

    def step(self) -> None:
        self.k += 1
        self.truth.step = self.k if self.k < self.steps else None

    def close(self) -> None:
        demo = _demo()
        self.truth.step = self.steps
        batch = next(iter(demo.batches()))  # the sampler's next batch (data_rng goes on)
        with torch.no_grad():
            self.model.loss(batch)
        self.truth.step = None
        self.truth.__exit__(None, None, None)


def truth(width: int, mutant: str = "base", seed: int = 0, steps: int = 10) -> pd.DataFrame:
    """The same training with :class:`Truth`'s hooks instead of the recorder: ``Truth.frame()``."""
    blocks: list[_TruthBlock] = []

    def recorder(model, opt):
        blocks.append(_TruthBlock(model, opt, steps))
        return blocks[-1]

    _train(width, mutant, seed, steps, recorder)
    return blocks[-1].truth.frame()


FAMILY = OutsideFamily(
    name="u_mup",
    source=f"graphcore-research/unit-scaling@{COMMIT}: examples/demo.ipynb (code cells 3, 5, 7, 9, 13, 19), "
           "LICENSE, NOTICE.md; the library itself: PyPI unit-scaling==0.3.5",
    licence="Apache-2.0",
    widths=WIDTHS,
    base_width=BASE_WIDTH,
    run=run,
    truth=truth,
    mutants=MUTANTS,
)
