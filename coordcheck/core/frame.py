"""Tidy frames: the schema every stage shares, and safe reading and writing.

Stage: storage. Input: the rows the probes produce (training side) or parquet files on
disk (analysis side). Output: a pandas DataFrame in the tidy schema below, one row per
measurement, long in the statistic, and parquet files written atomically (write to a
temporary name in the same directory, then rename), so a partial file never appears.

Columns (in order):

==================  =======  ====================================================
column              dtype    meaning
==================  =======  ====================================================
``config_id``       str      hash of the resolved configuration minus width/seed
``model``           str      builder name (``gpt``, ``mlp`` or its dotted path)
``parametrization`` str      ``mup`` / ``sp`` / ``none``
``optimizer``       str      ``adam`` / ``adamw`` / ``sgd`` or a factory's path
``lr``              float64  base learning rate
``data``            str      data name (``tokens``, ``gaussian``, ``text``, ...)
``data_policy``     str      ``fixed`` (the same batch at every step)
``family_id``       str      hash of the resolved configuration minus width, seed,
                             depth and experts: the depths of a depth sweep share it
                             (= ``config_id`` when no depth is set)
``width``           int64    model width
``depth``           int64    residual blocks, as set by ``depth`` (0: not set,
                             the model's own)
``experts``         int64    experts per mixture-of-experts layer, as set by
                             ``experts`` (0: not set, the model's own); the
                             counts of one configuration share its family_id
``seed``            int64    ``torch.manual_seed`` value used before building
``step``            int64    0 = forward at initialisation; t = after t updates
``module``          str      dotted module name (``(root)`` for the root module,
                             ``(loss)`` for loss rows)
``layer_index``     int64    block depth: 0 = before the first block (embeddings),
                             i + 1 = block i, L + 1 = after the last block
                             (readout); -1 for loss rows
``role``            str      ``input`` / ``hidden`` / ``output`` / ``attention`` /
                             ``norm``; ``loss`` for loss rows
``call_order``      int64    position of the module's first call in the step-0
                             forward (0 = first); the largest is the model's
                             output; -1 for loss rows
``head_dim``        int64    head dimension of captured attention logits
                             (``(sdpa)``, ``(mha)``, their ``+mask`` forms): the
                             last dimension of q, which q.k sums over, as the
                             probe saw it at this width (one value per module
                             and width, repeated on its rows); 0 on every
                             other row. The verdict's step-0 1/d_head test
                             applies only where it grows with width (rule 3)
``tensor``          str      ``out`` (module output), ``delta`` (output minus the
                             same module's step-0 output on the same batch),
                             ``in``, ``own`` (below), ``loss``; ``eps`` (Adam's epsilon, ``tensors``
                             with ``eps``: ``module`` is a *parameter*'s
                             dotted name, layer_index / role / call_order
                             its owning module's, only ``stat`` ``mean``:
                             the fraction of its coordinates where ε >=
                             0.1 sqrt(v_hat) after ``step`` updates;
                             :mod:`coordcheck.record.eps`; not an activation, so
                             the verdict's activation rules skip it);
                             ``load`` (a router's spread of the tokens over
                             its experts, ``module`` ``<router>.(load)``,
                             role ``routing``, only ``stat`` ``max_load``
                             and ``entropy``: :mod:`coordcheck.record.load`)
``stat``            str      ``std`` / ``l1`` / ``rms`` / ``mean`` / ``absmax``;
                             ``value`` for loss rows; ``max_load`` /
                             ``entropy`` for load rows
``value``           float64  the measurement (may be NaN or inf after divergence)
==================  =======  ====================================================

Tensors ``in`` and ``own`` (:mod:`coordcheck.record.own`): recorded for every module that owns parameters
directly (``module.parameters(recurse=False)``, some requiring grad) and whose output is recorded, on
the *sampled rows* ``x_s``: the first ``own.sampled_rows(n)`` entries (at most ``SAMPLED_ROWS`` = 8,
at most a quarter, at least one) of the leading dimension ``n`` of every tensor argument whose leading
size equals the first tensor argument's — the same rows at every width, seed and step (the batch is
fixed); for sequence-first inputs ``(T, B, ...)`` they are the first time steps.

* ``in``: the module's input on the sampled rows (the first floating-point tensor among its
  arguments); absent for integer inputs (embeddings). It is some other module's output: evidence of
  what a module inherits, not judged on its own.
* ``own``: what the module's *own* parameters do, as a gain. Step 0: ``f(x_s; θ_0) / s(x_s)``, the
  initialisation gain; step t >= 1: ``(f(x_s; θ_t) - f(x_s; θ_0)) / s(x_s)``, the change of its
  output from its own update on the input it receives now (θ_0: its own parameters at step 0, the
  rest of the model as it is). ``s(x) = rms(x)`` over the sampled rows; ``s = 1`` for
  normalisation layers (role ``norm``), integer inputs and an all-zero input. Under Adam-family
  optimizers the gain does not move with the scale of x; under SGD it does (ΔW carries x).
  Measured (``experiments/own_update.py``: widths 128-512, 2 seeds, steps 0-4): under muP in the
  mup package's form (``MuReadout``, Mu* optimizers) ``own`` after updates is flat in width for
  every role — Adam: built-in GPT role medians -0.09..+0.00 (single hidden modules down to -0.25
  at step 4), MLP within 0.10; SGD: the MLP within 0.11 — and at step 0 flat for input, hidden and
  norm, exactly 0 for a zero-initialised readout. Standard parametrization with Adam: hidden
  +0.8..+1.0 and readout +0.9..+1.0 (GPT), embeddings flat (the MLP's readout only at step 1: +0.98,
  then +0.05..+0.25 while its loss rises at width 512). What a judge of ``own`` must know:
  a multiplier applied *outside* the readout module (hand-written ``logits = lm_head(x) * base /
  width``, recorded as ``(root)``) is not in the module's ``own``: a correct model's ``lm_head``
  own grows like width^+0.5 at step 0 and +0.6..+1.0 after updates; the multiplier's exponent
  (``(root)`` out minus the readout's out, -1.00) must be added. Under muP with SGD the built-in
  GPT's zero-initialised query and its key learn slower at larger width in the first steps
  (``c_q`` own -0.5, ``c_k`` down to -1.7 at steps 3-4, lr 0.1; with Adam flat), which the verdict
  already reports on ``c_q``'s output.

Columns added after the first release (``FILLED``: ``head_dim``) are filled with their default
(0: not recorded) when a frame lacks them or holds NaN there, so frames written before them, or
built by hand, still read; the verdict then says what it could not judge without them.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

__all__ = [
    "QK_LOGITS",
    "COLUMNS",
    "FILLED",
    "STATS",
    "TENSORS",
    "NOT_ACTIVATIONS",
    "EPS_TENSOR",
    "LOAD_TENSOR",
    "WEIGHT_TENSOR",
    "UPDATE_TENSOR",
    "GAIN_TENSOR",
    "FACT_TENSORS",
    "LOAD_JUDGED",
    "DEFAULT_TENSORS",
    "CAUSE_TENSORS",
    "ROLES",
    "FRAME_NAME",
    "LOSS_MODULE",
    "FrameError",
    "empty_frame",
    "write_frame",
    "read_frame",
    "atomic_write",
    "digest",
]

FRAME_NAME = "frame.parquet"  # fixed file name; what varies lives in directory names
LOSS_MODULE = "(loss)"
ROOT_MODULE = "(root)"
# Suffixes of captured attention logits that are exactly q k^T * scale (no additive bias or mask folded in):
# at initialisation, with independent q and k, they shrink like width^-0.5 under muP's 1/d_head scaling.
QK_LOGITS = ("(sdpa)", "(mha)")

STATS = ("std", "l1", "rms", "mean", "absmax")
TENSORS = ("out", "delta", "in", "own", "loss", "eps", "load", "weight", "update", "gain")
EPS_TENSOR = "eps"  # Adam's epsilon fraction per parameter (coordcheck.record.eps, read by coordcheck.judge.explain)
LOAD_TENSOR = "load"  # a router's load over its experts (coordcheck.record.load; judged by its own rule)
LOAD_JUDGED = "max_load"  # the load's statistic the verdict judges (its entropy is shown)
# Facts measured from the weights (coordcheck.record.weights, judged by coordcheck.judge.facts): per parameter, W and
# the change ΔW of a measured update (rms, fro, spec; the step's lr, wd and sgd_lr as labels); per matrix module, its
# output over its weight applied to its input (gain, fit)
WEIGHT_TENSOR, UPDATE_TENSOR, GAIN_TENSOR = "weight", "update", "gain"
FACT_TENSORS = (WEIGHT_TENSOR, UPDATE_TENSOR, GAIN_TENSOR)
NOT_ACTIVATIONS = ("loss", EPS_TENSOR, LOAD_TENSOR, *FACT_TENSORS)  # tensor kinds the activation rules do not judge
DEFAULT_TENSORS = ("out", "delta")  # what the probes record unless told otherwise (config: tensors)
# Each parameter owner's input and own update (coordcheck.record.own): evidence shown beside the verdict, never
# judged (the causes come from the facts measured from the weights, which every path records); a setting, since the own
# update costs about one more forward of the probe batch
CAUSE_TENSORS = ("out", "delta", "in", "own")
ROLES = ("input", "hidden", "output", "attention", "norm", "loss")

COLUMNS: dict[str, str] = {
    "config_id": "str",
    "model": "str",
    "parametrization": "str",
    "optimizer": "str",
    "lr": "float64",
    "data": "str",
    "data_policy": "str",
    "family_id": "str",
    "width": "int64",
    "depth": "int64",
    "experts": "int64",
    "seed": "int64",
    "step": "int64",
    "module": "str",
    "layer_index": "int64",
    "role": "str",
    "call_order": "int64",
    "head_dim": "int64",
    "tensor": "str",
    "stat": "str",
    "value": "float64",
}
# Columns added after the first release -> the value that fills them in a frame without them (0: not recorded).
FILLED: dict[str, object] = {"head_dim": 0, "depth": 0, "experts": 0}
FROM_CONFIG_ID = ("family_id",)  # added later too, filled from config_id (a frame without depth: one family a config)


class FrameError(ValueError):
    """A file that is not a coordcheck frame (missing columns, wrong types, unreadable)."""


def digest(data: object, length: int = 12) -> str:
    """Short stable hash of JSON-able ``data`` (keys sorted): ``config_id`` and the resume key."""
    return hashlib.sha1(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:length]


def empty_frame(columns: dict[str, str] = COLUMNS) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def conform(df: pd.DataFrame, source: str = "frame", columns: dict[str, str] = COLUMNS,
            what: str = "coordcheck frame") -> pd.DataFrame:
    """Check the schema (``columns``) and cast to its dtypes; raise FrameError naming what is wrong.
    Extra columns follow the schema's. ``columns`` and ``what``: another frame's schema (the loss frame).
    A column of ``FILLED`` that the schema has is filled with its default where missing or NaN."""
    fill = {c: v for c, v in FILLED.items() if c in columns and (c not in df.columns or df[c].isna().any())}
    fill.update({c: df["config_id"] for c in FROM_CONFIG_ID if c in columns and "config_id" in df.columns
                 and (c not in df.columns or df[c].isna().any())})
    if fill:
        # object first: a column of NaN (float) filled with strings is cast to the schema's dtype just below
        df = df.assign(**{c: df[c].astype(object).where(df[c].notna(), v) if c in df.columns else v
                          for c, v in fill.items()})
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise FrameError(f"{source}: not a {what}, missing columns {missing}")
    try:
        out = df.astype(dict(columns))
    except (TypeError, ValueError) as e:
        raise FrameError(f"{source}: column types do not match the {what} schema ({e})") from None
    extra = [c for c in df.columns if c not in columns]
    return out[list(columns) + extra]


def _umask() -> int:
    """This process's umask: from /proc on Linux (reading it changes nothing); elsewhere os.umask, which can only be
    read by setting it, so it is put straight back."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        mask = os.umask(0o077)  # briefly the strictest mask, never a looser one
        os.umask(mask)
        return mask


def atomic_write(path: Path, write) -> Path:
    """Call ``write(tmp_path)`` then rename onto ``path``: readers never see a partial file.

    The file gets the mode any new file gets here (0644 under the usual umask 022), not ``mkstemp``'s 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_frame(df: pd.DataFrame, path: str | os.PathLike, check=conform) -> Path:
    """Write a tidy frame as parquet, atomically, after ``check`` (its schema's conform)."""
    df = check(df)
    return atomic_write(Path(path), lambda p: df.to_parquet(p, index=False))


def read_frame(path: str | os.PathLike, check=conform) -> pd.DataFrame:
    """Read one parquet frame (never unpickles) and ``check`` its schema."""
    path = Path(path)
    try:
        df = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise FrameError(f"{path}: unreadable parquet ({type(e).__name__}: {e})") from None
    return check(df, str(path))


def concat_frames(frames: Iterable[pd.DataFrame], check=conform, empty=empty_frame) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return empty()
    return check(pd.concat(frames, ignore_index=True))
