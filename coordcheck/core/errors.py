"""User-facing errors and what every command exits with.

Stage: all. Every mistake a user can make (bad width, unknown builder, data that does not
fit the model, ...) raises :class:`CoordCheckError` with a message of one line; the CLI
prints it without a traceback and exits 2 (:data:`USER_ERROR`), the Python API lets it
propagate. :data:`EXIT` is the one table from an outcome to an exit status, for every command
(``coordcheck``, ``coordcheck.report``, ``coordcheck.transfer``, ``coordcheck.gradflow``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import field, fields
from typing import Any

__all__ = ["CoordCheckError", "JobsFailedError", "RefusedError", "exit_status", "EXIT", "OK", "FAILED", "USER_ERROR",
           "check_count",
           "check_flag", "positive_number", "check_width", "resolve_seeds", "check_threads", "check_loss", "knob", "check_knobs", "expected", "in_range"]

OK, FAILED, USER_ERROR = 0, 1, 2  # a job that failed, or a sweep with no report, exits FAILED
EXIT = {  # outcome -> exit status; a verdict's only with --strict / report.strict=true (a CI gate)
    "pass": OK, "fail": FAILED, "inconclusive": USER_ERROR,  # coordinate check (coordcheck.judge.verdict)
    "transfers": OK, "does not transfer": FAILED,  # μTransfer (coordcheck.transfer.fit; inconclusive as above)
    "ok": OK, "warning": OK, "error": FAILED,  # gradient flow (always: a blocking diagnosis fails)
}


class CoordCheckError(ValueError):
    """A user mistake, reported in one line that says what to change."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # one line, always


class RefusedError(CoordCheckError):
    """Several user mistakes found at once (runs that cannot be judged together): ``head``, then one line each."""

    def __init__(self, head: str, lines: list[str]):
        ValueError.__init__(self, " ".join(head.split()) + "".join(f"\n  {' '.join(str(x).split())}" for x in lines))


class JobsFailedError(CoordCheckError):
    """No report because no job of the sweep left a frame: its jobs failed (not the command's input), so every
    command that meets it exits :data:`FAILED`, as the sweep itself did."""


def exit_status(e: CoordCheckError) -> int:
    """What a command exits with when it stops on ``e``: :data:`FAILED` for failed jobs, else :data:`USER_ERROR`."""
    return FAILED if isinstance(e, JobsFailedError) else USER_ERROR


def check_count(value: object, key: str, minimum: int = 1) -> int:
    """``value`` as an integer >= ``minimum`` (not a bool), else one line naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CoordCheckError(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def check_flag(value: object, key: str) -> bool:
    """``value`` as a bool, else one line naming ``key`` (``figures=3`` is not silently true)."""
    if not isinstance(value, bool):
        raise CoordCheckError(f"{key} must be true or false, got {value!r}")
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


def check_width(width: object, *, divisor: int = 1, divisor_name: str = "", key: str = "width") -> int:
    """``width`` as an int (an integral float is one), else one line saying what to change. ``key``: the name the
    user wrote (``base_width``); ``divisor``: a number the width must be a multiple of (``n_head``)."""
    if isinstance(width, bool) or not isinstance(width, int):
        if isinstance(width, float) and width.is_integer():
            width = int(width)
        else:
            raise CoordCheckError(f"{key} must be a positive integer, got {width!r}")
    if width <= 0:
        raise CoordCheckError(f"{key} must be a positive integer, got {width}: use {key} >= 1")
    if width % divisor:
        raise CoordCheckError(
            f"{key} {width} is not divisible by {divisor_name}={divisor}: "
            f"use {key}s that are multiples of {divisor} (or change {divisor_name})"
        )
    return width


def check_depth(depth: object, key: str = "depth", *, optional: bool = False) -> int | None:
    """A depth (number of residual blocks) as an int >= 1, else one line; ``optional``: None too (the model's own)."""
    if depth is None and optional:
        return None
    if isinstance(depth, float) and depth.is_integer():
        depth = int(depth)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        what = "a positive integer (the number of residual blocks)" + (" or null (the model's own)" if optional else "")
        raise CoordCheckError(f"{key} must be {what}, got {depth!r}")
    return depth


def resolve_seeds(seeds: int | Sequence[int]) -> list[int]:
    """``3`` -> [0, 1, 2]; a list is used as given."""
    if isinstance(seeds, bool):
        raise CoordCheckError(f"seeds must be a count or a list of integers, got {seeds!r}")
    if isinstance(seeds, int):
        if seeds < 1:
            raise CoordCheckError(f"seeds must be >= 1, got {seeds}")
        return list(range(seeds))
    out = list(seeds) if isinstance(seeds, Sequence) and not isinstance(seeds, str) else []
    if not out or not all(isinstance(s, int) and not isinstance(s, bool) for s in out):
        raise CoordCheckError(f"seeds must be a count or a non-empty list of integers, got {seeds!r}")
    return out


def check_threads(threads: object) -> int | None:
    """``threads``: a positive integer, or ``auto`` (null too), returned as None: the caller splits the cores."""
    if threads is None or threads == "auto":
        return None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise CoordCheckError(f"threads must be a positive integer or auto, got {threads!r}")
    return threads


def check_loss(loss: object) -> str | None:
    """``loss``: null (cross-entropy over the last dim) or ``model`` (the loss the model returns)."""
    if not (loss is None or loss == "model"):
        raise CoordCheckError(f"loss must be null (cross-entropy) or model (the loss the model returns), got {loss!r}")
    return loss


_COMPARE = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


def in_range(value: Any, bounds: tuple[tuple[str, float], ...]) -> bool:
    """Whether ``value`` is finite and meets every bound (``(">", 0)``, ...)."""
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return all(_COMPARE[op](value, bound) for op, bound in bounds)


def knob(default: Any, *bounds: tuple[str, float], help: str, choices: tuple[str, ...] = ()) -> Any:
    """A field of a rules dataclass (``verdict.Rules``, ``transfer.fit.TransferRules``): its default, its range
    (``(">", 0)``, ...), its closed set of values and a help line — the one definition the config schema, the report
    CLI's flags and :func:`check_knobs` all read."""
    return field(default=default, metadata={"bounds": bounds, "help": help, "choices": choices})


def expected(kind: type, bounds: tuple[tuple[str, float], ...] = (), choices: tuple[str, ...] = ()) -> str:
    """What a knob takes, in words: ``a number > 0``, ``an integer >= 3``, ``one of std, l1``, ``true or false``."""
    if choices:
        return "one of " + ", ".join(choices)
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(kind, "a value")
    return " and ".join([words, *(f"{op} {bound}" for op, bound in bounds)]).replace(" and ", " ", 1)


def check_knobs(rules: Any) -> None:
    """Every :func:`knob` field of ``rules`` against its type, range and choices; one line for a bad one."""
    for f in fields(rules):
        value, kind = getattr(rules, f.name), type(f.default)
        bounds, choices = f.metadata.get("bounds", ()), f.metadata.get("choices", ())
        if kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        ok = ok and in_range(value, bounds) and (not choices or value in choices)
        if not ok:
            raise CoordCheckError(f"{f.name} must be {expected(kind, bounds, choices)}, got {value!r}")
