"""User-facing errors: one line that says what to change.

Stage: all. Every mistake a user can make (bad width, unknown builder, data that does not
fit the model, ...) raises :class:`CoordCheckError` with a message of one line; the CLI
prints it without a traceback and exits non-zero, the Python API lets it propagate.
"""

from __future__ import annotations

__all__ = ["CoordCheckError"]


class CoordCheckError(ValueError):
    """A user mistake, reported in one line that says what to change."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # one line, always
