"""User-facing errors and what every command exits with.

Stage: all. Every mistake a user can make (bad width, unknown builder, data that does not
fit the model, ...) raises :class:`CoordCheckError` with a message of one line; the CLI
prints it without a traceback and exits 2 (:data:`USER_ERROR`), the Python API lets it
propagate. :data:`EXIT` is the one table from an outcome to an exit status, for every command
(``coordcheck``, ``coordcheck.report``, ``coordcheck.transfer``, ``coordcheck.gradflow``).
"""

from __future__ import annotations

import math

__all__ = ["CoordCheckError", "EXIT", "OK", "FAILED", "USER_ERROR", "check_count", "positive_number"]

OK, FAILED, USER_ERROR = 0, 1, 2  # a job that failed, or a sweep with no report, exits FAILED
EXIT = {  # outcome -> exit status; a verdict's only with --strict / report.strict=true (a CI gate)
    "pass": OK, "fail": FAILED, "inconclusive": USER_ERROR,  # coordinate check (coordcheck.verdict)
    "transfers": OK, "does not transfer": FAILED,  # μTransfer (coordcheck.transfer.fit; inconclusive as above)
    "ok": OK, "warning": OK, "error": FAILED,  # gradient flow (always: a blocking diagnosis fails)
}


class CoordCheckError(ValueError):
    """A user mistake, reported in one line that says what to change."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # one line, always


def check_count(value: object, key: str) -> int:
    """``value`` as an integer >= 1 (not a bool), else one line naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CoordCheckError(f"{key} must be an integer >= 1, got {value!r}")
    return value


def positive_number(value: object, key: str) -> float:
    """``value`` as a finite number > 0, else one line naming ``key`` (``lr must be a positive number, got -1``)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CoordCheckError(f"{key} must be a positive number, got {value!r}") from None
    if isinstance(value, bool) or not (math.isfinite(number) and number > 0):
        raise CoordCheckError(f"{key} must be a positive number, got {value!r}")
    return number
