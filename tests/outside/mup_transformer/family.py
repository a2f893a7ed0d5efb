"""microsoft/mup's examples/Transformer as an outside family: its own main.py (argparse, set_base_shapes from its own
base and delta models, MuAdam, gradient clipping, its own init) trains each width in a subprocess, as its README runs
it with muP on (``--load_base_shapes ... --optimizer muadam``; at main.py's default ``--lr 0.001``, see SOURCE.md),
with the recorder (or Truth's hooks) inserted by the ``# coordcheck`` lines listed in SOURCE.md; ``hook.py`` is what
those lines call.

Settings as its CoordCheck notebook: 2 layers, 2 heads (fixed: the head dimension grows with width), ffn_ratio 1, no
bias, dropout 0; here bptt 32, batch 8, base width 64 (its base-shape file written by its own ``--save_base_shapes``),
a synthetic corpus (``write_corpus``) in the wikitext layout its data.py reads, sized so that one epoch is exactly
``steps + 1`` full batches: updates 1..steps are recorded, and Truth sees the forwards of iterations 0..steps.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from tests.outside.common import OutsideFamily, Plant

HERE = Path(__file__).resolve().parent
VENDOR = HERE / "vendor"
ROOT = HERE.parents[2]  # the repository: tests.outside.* importable in the subprocess
COMMIT = "19814971934ef91dd546f88e913fc963e096d11c"

BASE_WIDTH = 64
WIDTHS = (64, 128, 256)
LR = 0.001  # main.py's own default --lr (its README trains muadam at 0.01: see SOURCE.md, the base is not flat there)
BPTT, BATCH = 32, 8
NHEAD = 2
SHAPE_FLAGS = ["--nlayers", "2", "--nhead", str(NHEAD), "--ffn_ratio", "1"]  # the model's shape (its defaults, stated)
FLAGS = [*SHAPE_FLAGS, "--optimizer", "muadam", "--lr", str(LR), "--dropout", "0", "--bptt", str(BPTT),
         "--batch_size", str(BATCH), "--epochs", "1"]  # --clip 0.25, --init_var 1, no --bias, no --tied: its defaults

MUTANTS: dict[str, Plant | None] = {
    "base": None,
    # transformer_encoder.layers.0.linear2.weight moved to a group of its own, lr times width/base (hook.py)
    "lr_hidden": Plant("lr", ("transformer_encoder.layers.0.linear2",)),
    # encoder.weight (the nn.Embedding) moved to a group of its own, lr divided by width/base (hook.py)
    "lr_embedding": Plant("lr", ("encoder",)),
    # transformer_encoder.layers.1.linear1.weight times sqrt(width/base) after init: std constant in width (hook.py)
    "init_hidden": Plant("init", ("transformer_encoder.layers.1.linear1",)),
    # its own flag: --output_mult width/base cancels MuReadout's 1/width_mult
    "output_multiplier": Plant("output_multiplier", ("decoder",)),
    # its own flag: --attn_mult d_head makes its scale sqrt(attn_mult)/d_head = 1/sqrt(d_head) (the SP scale)
    "attention_scale": Plant("attention_scale", ("transformer_encoder.layers.0.self_attn",
                                                 "transformer_encoder.layers.1.self_attn")),
    # Adam's eps 1e-3 in every group at every width (hook.EPS; the example's is 1e-8): too large at every width, it
    # sets the step of every parameter but the readout's (their update_rms slopes fall by 0.35-0.6; the decoder's 0.14)
    "eps": Plant("eps", ("encoder", *(f"transformer_encoder.layers.{i}.{m}" for i in (0, 1) for m in (
        "self_attn", "self_attn.out_proj", "linear1", "linear2", "norm1", "norm2")))),
}
# the example's own flags, their values by width: --output_mult width/base (MuReadout then multiplies by 1);
# --attn_mult d_head = width/nhead (its scale sqrt(attn_mult)/d_head is then 1/sqrt(d_head))
_MUTANT_FLAGS = {"output_multiplier": lambda w: ["--output_mult", repr(w / BASE_WIDTH)],
                 "attention_scale": lambda w: ["--attn_mult", repr(w / NHEAD)]}


def write_corpus(path: Path, n_train: int, vocab: int = 48, seed: int = 0) -> None:
    """``train.txt`` of exactly ``n_train`` tokens (words and one ``<eos>`` a line, as data.py counts them),
    ``valid.txt`` and ``test.txt`` of 400: lines of up to 11 words from a sparse Markov chain (three successors a
    word, weights 6:3:1), so that the loss falls. The same text at every width."""
    path.mkdir(parents=True, exist_ok=True)
    words = [f"w{i}" for i in range(vocab)]
    succ = {w: random.Random(f"{seed}-{w}").sample(words, 3) for w in words}
    for name, n in (("train", n_train), ("valid", 400), ("test", 400)):
        rng = random.Random(f"{seed}-{name}")
        lines, line, w, count = [], [], rng.choice(words), 0
        while count < n:
            if len(line) >= 11 or count + len(line) + 1 >= n:
                lines.append(line)
                count, line = count + len(line) + 1, []
                continue
            line.append(w)
            w = rng.choices(succ[w], weights=(6, 3, 1))[0]
        (path / f"{name}.txt").write_text("".join(" ".join(ws) + "\n" for ws in lines))


def _main(args: list[str], cwd: Path, conf: dict | None = None) -> None:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    env.pop("MUP_TRANSFORMER_CC", None)
    if conf is not None:
        env["MUP_TRANSFORMER_CC"] = json.dumps(conf)
    p = subprocess.run([sys.executable, str(VENDOR / "main.py"), *args], cwd=cwd, env=env, capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError(f"main.py {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}")


_BSH: dict[int, Path] = {}


def base_shapes(base_width: int = BASE_WIDTH) -> Path:
    """Its own ``--save_base_shapes`` at the base width (base and delta models built by main.py), once a process."""
    if base_width not in _BSH:
        d = Path(tempfile.mkdtemp(prefix="mup_transformer_bsh_"))
        write_corpus(d / "data", 400)  # main.py loads a corpus before it saves the shapes (no vocabulary in them)
        _main(["--data", str(d / "data"), "--d_model", str(base_width), *SHAPE_FLAGS,
               "--save_base_shapes", str(d / f"width{base_width}.bsh")], cwd=d)
        _BSH[base_width] = d / f"width{base_width}.bsh"
    return _BSH[base_width]


def _train(width: int, mode: str, out: Path, mutant: str, seed: int, steps: int) -> None:
    assert mutant in MUTANTS, mutant
    with tempfile.TemporaryDirectory(prefix="mup_transformer_") as tmp:
        tmp = Path(tmp)
        write_corpus(tmp / "data", BATCH * ((steps + 1) * BPTT + 1))  # one epoch: steps + 1 full batches
        args = ["--data", str(tmp / "data"), "--d_model", str(width), "--load_base_shapes", str(base_shapes()),
                *FLAGS, "--seed", str(seed), "--log_dir", str(tmp)]
        if mutant in _MUTANT_FLAGS:
            args += _MUTANT_FLAGS[mutant](width)
        _main(args, cwd=tmp, conf={"mode": mode, "out": str(out), "steps": steps, "mutant": mutant})


def run(width: int, out, mutant: str = "base", seed: int = 0, steps: int = 10) -> None:
    """Train one width in main.py's own loop with ``coordcheck.record`` writing the job directory ``out``."""
    out = Path(out).resolve()
    _train(width, "record", out, mutant, seed, steps)
    if not (out / "job.json").exists():
        raise RuntimeError(f"main.py wrote no run to {out} (a NaN loss makes it exit(0) early)")


def truth(width: int, mutant: str = "base", seed: int = 0, steps: int = 10) -> pd.DataFrame:
    """The same training with Truth's hooks instead of the recorder (no coordcheck imported): Truth.frame()."""
    with tempfile.TemporaryDirectory(prefix="mup_transformer_truth_") as tmp:
        out = Path(tmp) / "truth.parquet"
        _train(width, "truth", out, mutant, seed, steps)
        return pd.read_parquet(out)


FAMILY = OutsideFamily(
    name="mup_transformer",
    source=f"microsoft/mup@{COMMIT}: examples/Transformer/main.py, model.py, data.py, _overrides.py; LICENSE",
    licence="MIT",
    widths=WIDTHS,
    base_width=BASE_WIDTH,
    run=run,
    truth=truth,
    mutants=MUTANTS,
)
