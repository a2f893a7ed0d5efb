"""The learning-rate sweep's tidy loss frame: its schema, and reading and writing it safely.

Stage: storage (the μTransfer twin of ``coordcheck.core.frame``). One row per (run, step, split):

==================  =======  ====================================================
column              dtype    meaning
==================  =======  ====================================================
``config_id``       str      hash of the resolved configuration minus width, lr
                             and parametrization: the same for a whole grid (of
                             one depth: a depth is part of a configuration)
``family_id``       str      the same hash minus the depth too: the depths of a
                             depth sweep share it (= ``config_id`` when no depth
                             is set; filled so in older frames)
``model``           str      builder name (``gpt`` or its dotted path)
``parametrization`` str      ``mup`` / ``sp`` / ``none``
``optimizer``       str      ``adam`` / ``adamw`` / ``sgd`` or a factory's path
``data``            str      data name (``text``, or the callable's dotted path)
``width``           int64    model width
``depth``           int64    residual blocks, as set by ``depth`` (0: not set, the
                             model's own; 0 in older frames)
``lr``              float64  base learning rate of the run
``seed``            int64    ``torch.manual_seed`` before building; also the
                             training batches' seed
``step``            int64    train rows: the update (0 = the first batch); the
                             held-out row: ``steps`` (after the last update)
``split``           str      ``train`` (the loss of that step's fresh batch,
                             before its update) or ``heldout`` (mean loss of the
                             held-out batches after training)
``loss``            float64  the loss; NaN on the held-out row of a diverged run
``status``          str      ``ok`` or ``diverged`` (the run stopped early: its
                             train loss turned non-finite or rose above
                             ``diverge`` times its first value)
==================  =======  ====================================================

Files are parquet (``transfer.parquet`` in each job directory), written atomically.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from coordcheck.core import frame

__all__ = ["COLUMNS", "FRAME_NAME", "OK", "DIVERGED", "TransferIdentity", "conform", "write_frame", "read_frame",
           "concat_frames", "empty_frame"]

FRAME_NAME = "transfer.parquet"
OK, DIVERGED = "ok", "diverged"

COLUMNS: dict[str, str] = {
    "config_id": "str",
    "model": "str",
    "parametrization": "str",
    "optimizer": "str",
    "data": "str",
    "family_id": "str",
    "width": "int64",
    "depth": "int64",
    "experts": "int64",
    "lr": "float64",
    "seed": "int64",
    "step": "int64",
    "split": "str",
    "loss": "float64",
    "status": "str",
}


@dataclass(frozen=True)
class TransferIdentity:
    """The identity columns of a loss frame, apart from width and lr. ``depth``: the depth the job set (0: the
    model's own); ``experts``: the number of experts it set (0: the model's own); ``family_id``: the configuration
    minus its depth and number of experts (None: ``config_id``)."""

    config_id: str
    model: str
    parametrization: str
    optimizer: str
    data: str
    family_id: str | None = None
    depth: int = 0
    experts: int = 0


def empty_frame() -> pd.DataFrame:
    return frame.empty_frame(COLUMNS)


def conform(df: pd.DataFrame, source: str = "frame") -> pd.DataFrame:
    """Check the loss-frame schema and cast to its dtypes (its columns only); FrameError names what is wrong."""
    return frame.conform(df, source, COLUMNS, "coordcheck transfer frame")[list(COLUMNS)]


def write_frame(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    return frame.write_frame(df, path, check=conform)


def read_frame(path: str | os.PathLike) -> pd.DataFrame:
    return frame.read_frame(path, check=conform)


def concat_frames(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    return frame.concat_frames(frames, check=conform, empty=empty_frame)
