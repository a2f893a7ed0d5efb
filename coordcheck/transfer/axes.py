"""Which curves belong together: the axes a learning rate can transfer across, and the keys of a curve family.

Stage: analysis (no torch). Input: the tidy loss frame (``coordcheck.transfer.frame``). Output: its axes — ``AXES``
(width, depth), ``axis_keys`` (the columns that name one curve family of an axis: a configuration across width, a
family at one width across depth), :func:`with_depth` (fills ``depth`` and ``family_id`` in older or hand-made
frames), :func:`swept` and :func:`axes_of` (which axes a frame sweeps) — shared by the optimum fit
(:mod:`coordcheck.transfer.fit`) and the verdict (:mod:`coordcheck.transfer.verdict`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from coordcheck.core.errors import CoordCheckError

__all__ = ["KEYS", "AXES", "AXIS_KEYS", "AXIS_WORDS", "axis_keys", "with_depth", "swept", "axes_of"]

KEYS = ["config_id", "parametrization"]
AXES = ("width", "depth", "experts")
# What one shift is fitted over: the width axis groups the jobs of one configuration (config_id includes the depth: a
# width x depth grid has a width shift per depth); the depth axis groups the depths of one family (family_id: the
# configuration minus its depth) at one width (a width x depth grid has a depth shift per width).
AXIS_KEYS: dict[str, list[str]] = {"width": KEYS, "depth": ["family_id", "parametrization", "width", "experts"],
                                   "experts": ["family_id", "parametrization", "width", "depth"]}
AXIS_WORDS = {"width": "width", "depth": "depth", "experts": "the number of experts"}  # "... across <words>"


def axis_keys(axis: str) -> list[str]:
    """The columns that name one curve family of ``axis`` (``AXIS_KEYS``); one line for an unknown axis."""
    if axis not in AXIS_KEYS:
        raise CoordCheckError(f"axis must be one of {', '.join(AXES)}, got {axis!r}")
    return AXIS_KEYS[axis]


def with_depth(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with ``depth`` (0: not set) and ``family_id`` (its ``config_id``) where a frame lacks them (older
    frames, hand-made ones), as ``coordcheck.core.frame.conform`` fills them."""
    fill = {}
    if "depth" not in frame.columns:
        fill["depth"] = 0
    if "experts" not in frame.columns:
        fill["experts"] = 0
    if "family_id" not in frame.columns:
        fill["family_id"] = frame["config_id"]
    elif frame["family_id"].isna().any():
        fill["family_id"] = frame["family_id"].fillna(frame["config_id"])
    return frame.assign(**fill) if fill else frame


def swept(frame: pd.DataFrame, axis: str) -> bool:
    """Whether ``axis`` is swept: some curve family of it (``axis_keys``) holds two or more of its values."""
    frame = with_depth(frame)
    held = frame[frame["split"] == "heldout"]
    if held.empty:
        return False
    return bool((held.groupby(axis_keys(axis))[axis].nunique() > 1).any())


def axes_of(frame: pd.DataFrame) -> list[str]:
    """The axes a frame's verdict is about: those swept (width first); width when none is (its verdict says why)."""
    return [a for a in AXES if swept(frame, a)] or ["width"]


def _select(df: pd.DataFrame, keys: Sequence[str], values: Sequence[Any]) -> pd.DataFrame:
    mask = np.ones(len(df), dtype=bool)
    for k, v in zip(keys, values):
        mask &= (df[k] == v).to_numpy()
    return df[mask]
