"""Typos: the closest valid name to a word a user mistyped, for one-line errors that say what was meant.

Stage: ground (shared by the command-line checks of :mod:`coordcheck.app.overrides` and the report knobs of
:mod:`coordcheck.report.knobs`). Input: a word and the names it could have meant. Output: the closest one, a
`` (did you mean ...?)`` hint, or whether the word is a slip of another.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest", "did_you_mean", "is_near"]


def closest(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The choice most like ``word`` (difflib's ratio, case-insensitive) if any reaches ``cutoff``; else None."""
    choices = [c for c in dict.fromkeys(choices) if c != word]
    lowered = {c.lower(): c for c in reversed(choices)}  # the first of equal lowercase spellings wins
    best = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=cutoff)
    return lowered[best[0]] if best else None


def did_you_mean(word: str, choices: Iterable[str], prefix: str = "") -> str:
    """`` (did you mean PREFIXbest?)`` for the closest choice, or an empty string when none is close."""
    best = closest(word, choices)
    return f" (did you mean {prefix}{best}?)" if best is not None else ""


def _distance(a: str, b: str) -> int:
    """Edits (insert, delete, substitute, swap two neighbours) from ``a`` to ``b``, case-insensitive."""
    a, b = a.lower(), b.lower()
    prev2, prev = [], list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[-1]


def is_near(word: str, other: str) -> bool:
    """Whether ``word`` is a slip of ``other``: one edit away (``widht``/``width``, ``seed``/``seeds``), two for names
    of 8 letters or more. Stricter than :func:`closest`: it decides that a ``+new_key`` is a typo."""
    return word != other and _distance(word, other) <= (2 if min(len(word), len(other)) >= 8 else 1)
