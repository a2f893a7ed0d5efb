"""Text for people and for JSON: numbers, Markdown cells and JSON-safe values, one way each.

Stage: output, shared by every report (``report``, ``transfer.report``, ``gradflow``).
Input: numbers, strings, DataFrames. Output: the strings and plain values their files hold.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from coordcheck.frame import atomic_write

__all__ = ["md_escape", "num", "json_safe", "records", "write_json"]

_MD_SPECIAL = str.maketrans({c: f"\\{c}" for c in "\\`*_{}[]<>()#+-!|~"})


def md_escape(text: object) -> str:
    """Escape text (module names, errors) for a Markdown table cell: no markup, no HTML, one line."""
    return " ".join(str(text).split()).translate(_MD_SPECIAL)


def num(x: object, fmt: str = "{:+.2f}") -> str:
    """``x`` formatted with ``fmt``; a dash for None, NaN, inf or anything that is not a number."""
    try:
        return "—" if x is None or not math.isfinite(float(x)) else fmt.format(float(x))
    except (TypeError, ValueError):
        return "—"


def json_safe(x: object) -> object:
    """Plain JSON values: numpy scalars as Python, non-finite floats as None, keys as strings (recursively)."""
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):  # numpy scalars
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def records(df: pd.DataFrame, columns: list[str]) -> list[dict]:
    """The rows of ``df`` (those of ``columns`` it has, in that order) as JSON-safe dicts."""
    cols = [c for c in columns if c in df.columns]
    return [json_safe(dict(zip(cols, row))) for row in df[cols].itertuples(index=False)]


def write_json(path: str | Path, payload: dict, *, allow_nan: bool = True) -> Path:
    """``payload`` as indented JSON, written atomically (anything JSON cannot hold as its ``str``).
    ``allow_nan=False``: a NaN or an infinity is an error (strict JSON; make the payload :func:`json_safe` first)."""
    text = json.dumps(payload, indent=2, allow_nan=allow_nan, default=str)
    return atomic_write(Path(path), lambda p: p.write_text(text))
