"""EleutherAI's nanoGPT-mup as an outside family: its own ``train.py`` (its AdamW groups with ``lr_scale``, the lr
set per group every iteration, its cosine schedule, clipping and weight decay) run with muP on, at widths 64-256
(base width 64, 4 heads: the head dimension grows with width), on a synthetic Markov-chain token stream (32 tokens).

``vendor/`` holds the files as the repository has them but for the lines marked ``# coordcheck`` (``SOURCE.md``);
``driver.py`` runs ``vendor/train.py`` in a subprocess of its own, with ``coordcheck.record`` (``run``) or
:class:`tests.outside.common.Truth` (``truth``) behind those lines. This module imports nothing of coordcheck.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from tests.outside.common import OutsideFamily, Plant

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]

BASE_WIDTH = 64
WIDTHS = (64, 128, 256)
N_HEAD = 4
VOCAB = 32  # a vocabulary of 256 leaves the base out of the muP regime at widths 64-256 (SOURCE.md)
BLOCK = 32
BATCH = 8
LR = 3e-3  # 1e-2 (the repo's coord-check lr) is chaotic here: seed noise swamps the slopes (SOURCE.md)
COMMIT = "b2a5e60948d2e11885dc76c1355af98705f54a70"

HIDDEN = tuple(f"transformer.h.{i}.{m}" for i in range(2) for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                                                        "mlp.c_proj"))
MUTANTS: dict[str, Plant | None] = {
    "base": None,
    # one hidden matrix moved to a group of lr_scale 1 (driver.mutate)
    "hidden_lr_unscaled": Plant("lr", ("transformer.h.0.mlp.c_fc",)),
    # the token embedding's lr_scale 1/m (driver.mutate); it is tied to lm_head: one parameter, either name is right
    "embedding_lr_scaled": Plant("lr", ("transformer.wte", "lm_head")),
    # the position embedding's lr_scale 1/m (driver.mutate)
    "position_lr_scaled": Plant("lr", ("transformer.wpe",)),
    # init std 0.02 at every width: times sqrt(m) after the model's init (driver.mutate)
    "hidden_init_constant": Plant("init", ("transformer.h.1.mlp.c_fc",)),
    # the model's own knob: mup_output_alpha = m cancels its 1/m on the readout's input
    "no_output_multiplier": Plant("output_multiplier", ("lm_head",)),
    # the model's own knob: mup_disable_attention_scaling=True, 1/sqrt(d_head)
    "attention_sqrt": Plant("attention_scale", ("transformer.h.0.attn", "transformer.h.1.attn")),
    # Adam's eps of the hidden matrices' group 1e-3 at every width (driver.mutate)
    "eps_large": Plant("eps", HIDDEN),
    # Adam's eps of the hidden matrices' group 1e-3 * width/64: growing with width (driver.mutate)
    "eps_grows": Plant("eps", HIDDEN),
    # the model's own knob: mup_disable_hidden_lr_scaling=True, every hidden matrix at lr_scale 1
    "all_hidden_lr_unscaled": Plant("lr", HIDDEN),
}


def write_data(data_dir: Path, vocab: int = VOCAB, n_train: int = 60_000, n_val: int = 4_096, seed: int = 0) -> None:
    """A first-order Markov chain over ``VOCAB`` tokens (each row a Dirichlet(0.05): a few likely successors),
    ``train.bin``/``val.bin`` as np.uint16 and ``meta.pkl`` with the vocab size, as train.py reads them. The same
    stream for every width and seed."""
    rng = np.random.default_rng(seed)
    cum = np.cumsum(rng.dirichlet(np.full(vocab, 0.05), size=vocab), axis=1)
    u = rng.random(n_train + n_val)
    tokens = np.empty(n_train + n_val, dtype=np.uint16)
    t = 0
    for i in range(len(tokens)):
        t = min(int(np.searchsorted(cum[t], u[i])), vocab - 1)
        tokens[i] = t
    data_dir.mkdir(parents=True, exist_ok=True)
    tokens[:n_train].tofile(data_dir / "train.bin")
    tokens[n_train:].tofile(data_dir / "val.bin")
    with open(data_dir / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": vocab}, f)


def argv(width: int, out: Path, data_dir: Path, mutant: str, seed: int, steps: int, **overrides) -> list[str]:
    """train.py's ``--key=value`` overrides: muP on at ``width``, 2 layers, 4 heads, CPU float32, no compile, no
    wandb, no checkpoints, one eval batch at iteration 0 only, the cosine schedule without warmup over 2*steps."""
    m = width / BASE_WIDTH
    args = dict(out_dir=str(out), dataset=str(data_dir), eval_interval=10**9, eval_iters=1, log_interval=10**9,
                always_save_checkpoint=False, never_save_checkpoint=True, wandb_log=False, csv_log=False,
                gradient_accumulation_steps=1, batch_size=BATCH, block_size=BLOCK, n_layer=2, n_head=N_HEAD,
                n_embd=width, dropout=0.0, bias=False, learning_rate=LR, max_iters=steps, decay_lr=True,
                warmup_iters=0, lr_decay_iters=2 * steps, min_lr=LR / 10, mup_enabled=True,
                mup_width_multiplier=float(m), seed=seed, device="cpu", dtype="float32", compile=False)
    args.update(overrides)
    if mutant == "no_output_multiplier":
        args["mup_output_alpha"] = float(m)
    elif mutant == "attention_sqrt":
        args["mup_disable_attention_scaling"] = True
    elif mutant == "all_hidden_lr_unscaled":
        args["mup_disable_hidden_lr_scaling"] = True
    return [f"--{k}={v!r}" if isinstance(v, float) else f"--{k}={v}" for k, v in args.items()]


def _drive(mode: str, width: int, out: Path, mutant: str, seed: int, steps: int, truth_out: Path | None = None,
           vocab: int = VOCAB, **overrides) -> None:
    if mutant not in MUTANTS:
        raise ValueError(f"unknown mutant {mutant!r}: {sorted(MUTANTS)}")
    with tempfile.TemporaryDirectory(prefix="nanogpt_mup_") as tmp:
        data_dir = Path(tmp) / "data"
        write_data(data_dir, vocab)
        spec = dict(mode=mode, mutant=mutant, data_dir=str(data_dir), block_size=overrides.get("block_size", BLOCK),
                    truth_out=str(truth_out) if truth_out else None,
                    argv=argv(width, out, data_dir, mutant, seed, steps, **overrides))
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT))
        proc = subprocess.run([sys.executable, str(HERE / "driver.py"), json.dumps(spec)], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"nanogpt_mup {mode} width {width} {mutant}: train.py failed\n"
                               f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def run(width: int, out: str | Path, mutant: str = "base", seed: int = 0, steps: int = 10, **overrides) -> None:
    """Train one width by train.py's loop with ``coordcheck.record`` writing the job directory ``out`` (steps 0..steps
    recorded). ``overrides``: other train.py keys, or ``vocab`` (for experiments; the defaults are the family's)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _drive("record", width, out.resolve(), mutant, seed, steps, **overrides)


def truth(width: int, mutant: str = "base", seed: int = 0, steps: int = 10, **overrides) -> pd.DataFrame:
    """The same training with :class:`Truth`'s hooks instead of the recorder: its frame (out_std at steps 0..steps,
    each the forward of the iteration after that many updates)."""
    with tempfile.TemporaryDirectory(prefix="nanogpt_mup_truth_") as tmp:
        frame = Path(tmp) / "truth.pkl"
        _drive("truth", width, Path(tmp) / "out", mutant, seed, steps, truth_out=frame, **overrides)
        return pd.read_pickle(frame)


FAMILY = OutsideFamily(
    name="nanogpt_mup",
    source=f"EleutherAI/nanoGPT-mup@{COMMIT}: model.py, train.py, configurator.py, LICENSE",
    licence="MIT",
    widths=WIDTHS,
    base_width=BASE_WIDTH,
    run=run,
    truth=truth,
    mutants=MUTANTS,
)
