"""Text for people and for JSON: numbers, Markdown cells and JSON-safe values, one way each.

Stage: output, shared by every report (``report``, ``transfer.report``, ``gradflow``).
Input: numbers, strings, DataFrames. Output: the strings and plain values their files hold.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd

from coordcheck.core.frame import atomic_write

__all__ = ["md_escape", "num", "json_safe", "records", "write_json"]

# What Markdown (CommonMark + GitHub tables) would read as markup, and nothing else: text stays readable in a
# terminal (``256-1024``, ``cpu (cpu)``, ``2.14.1+cu130``, ``lm_head``) and renders as it reads.
_MD_INLINE = re.compile(r"""
      [\\`*|<~]                 # an escape, code, emphasis, a table cell's end, HTML or an autolink, strikethrough
    | (?<![^\W_])_ | _(?![^\W_])  # an _ that can open or close emphasis: not between two letters or digits
    | \](?=\()                    # ](: an inline link or image
    | &(?=\#?\w+;)                # an entity (&lt;)
""", re.VERBOSE)
# ... and at the start of a list item: a heading, a block quote, a list marker
_MD_LEADING = re.compile(r"^(?:\#{1,6}(?=\s|$)|>|[-+](?=\s|$)|\d{1,9}(?=[.)](?:\s|$)))")


def md_escape(text: object) -> str:
    """``text`` (module names, errors, reasons) as one line of Markdown that renders as it reads, also in a table
    cell or at the start of a list item: a backslash before the characters that would start markup there
    (``|``, backticks, ``*``, ``_`` at a word's edge, ``<``, ``~``, ``](``, ``&name;``; a leading ``#``, ``>``,
    ``-``, ``+`` or ``1.``), and nowhere else."""
    line = " ".join(str(text).split())
    line = _MD_INLINE.sub(lambda m: "\\" + m.group(), line)
    m = _MD_LEADING.match(line)
    if m:  # "1." -> "1\.", "#" -> "\#"
        line = (m.group() + "\\" + line[m.end():]) if m.group()[0].isdigit() else "\\" + line
    return line


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
