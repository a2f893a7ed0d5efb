"""``coordcheck.core.errors``: the one-line error, the exit table, and the checks every knob and value goes through."""

from __future__ import annotations

import math

import pytest

from coordcheck.core.errors import (
    EXIT, FAILED, OK, USER_ERROR, CoordCheckError, check_count, check_flag, check_knobs, check_loss, check_threads,
    check_width, expected, in_range, positive_number, resolve_seeds,
)
from coordcheck.transfer.fit import STATUSES as TRANSFER_STATUSES
from coordcheck.transfer.fit import TransferRules
from coordcheck.judge.verdict import Rules


def test_an_error_is_always_one_line():
    assert str(CoordCheckError("width 66\n  is not   divisible")) == "width 66 is not divisible"


def test_one_exit_table_covers_every_command():
    assert (OK, FAILED, USER_ERROR) == (0, 1, 2)
    assert {s: EXIT[s] for s in ("pass", "fail", "inconclusive")} == {"pass": 0, "fail": 1, "inconclusive": 2}
    assert [EXIT[s] for s in TRANSFER_STATUSES] == [0, 1, 2]
    assert [EXIT[s] for s in ("ok", "warning", "error")] == [0, 0, 1]


@pytest.mark.parametrize("cls,kwargs,message", [
    (Rules, {"tol": -1}, "tol must be a number > 0, got -1"),
    (Rules, {"tol": math.inf}, "tol must be a number > 0, got inf"),
    (Rules, {"stat": "foo"}, "stat must be one of std, l1, rms, mean, absmax, got 'foo'"),
    (Rules, {"min_widths": 1}, "min_widths must be an integer >= 2, got 1"),
    (Rules, {"persist": True}, "persist must be an integer >= 1, got True"),
    (Rules, {"min_window": 2.0}, "min_window must be an integer >= 1, got 2.0"),
    (TransferRules, {"level": 1.0}, "level must be a number > 0 and < 1, got 1.0"),
    (TransferRules, {"min_points": 2}, "min_points must be an integer >= 3, got 2"),
    (TransferRules, {"tol": "0.5"}, "tol must be a number > 0, got '0.5'"),
])
def test_rules_check_their_knobs_when_made(cls, kwargs, message):
    with pytest.raises(CoordCheckError) as e:
        cls(**kwargs)
    assert str(e.value) == message


def test_rules_accept_what_their_knobs_allow():
    assert Rules(tol=1, stat="l1", rise=0).tol == 1 and TransferRules(tol=2, level=0.5).level == 0.5
    check_knobs(Rules())  # the defaults are inside their own ranges


def test_ranges_and_words():
    assert in_range(0.5, ((">", 0), ("<", 1))) and not in_range(1, ((">", 0), ("<", 1)))
    assert not in_range(math.inf, ()) and not in_range(math.nan, ((">=", 0),)) and in_range(3, ())
    assert expected(float, ((">", 0), ("<", 1))) == "a number > 0 and < 1"
    assert expected(int, ((">=", 2),)) == "an integer >= 2" and expected(bool) == "true or false"
    assert expected(str, choices=("a", "b")) == "one of a, b"


def test_value_checks():
    assert check_count(3, "steps") == 3 and check_count(0, "seed", minimum=0) == 0
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(CoordCheckError, match="steps must be an integer >= 1"):
            check_count(bad, "steps")
    assert check_flag(False, "figures") is False
    with pytest.raises(CoordCheckError, match="figures must be true or false, got 3"):
        check_flag(3, "figures")
    assert positive_number("1e-3", "lr") == 0.001
    for bad in (0, -1, "abc", None, True, math.inf, math.nan):
        with pytest.raises(CoordCheckError, match="lr must be a positive number"):
            positive_number(bad, "lr")


def test_width_seeds_threads_and_loss_checks():
    assert check_width(256) == 256 and check_width(64.0) == 64 and check_width(48, divisor=4, divisor_name="n_head")
    for bad, words in ((0, "width must be a positive integer, got 0: use width >= 1"),
                       ("abc", "width must be a positive integer, got 'abc'"), (True, "got True"), (1.5, "got 1.5")):
        with pytest.raises(CoordCheckError, match=words):
            check_width(bad)
    with pytest.raises(CoordCheckError, match="^base_width must be a positive integer, got -8"):
        check_width(-8, key="base_width")
    assert resolve_seeds(3) == [0, 1, 2] and resolve_seeds([5, 7]) == [5, 7]
    for bad in (0, True, [], [1.5], "ab", 2.5):
        with pytest.raises(CoordCheckError, match="seeds must be"):
            resolve_seeds(bad)
    assert check_threads("auto") is None and check_threads(None) is None and check_threads(2) == 2
    with pytest.raises(CoordCheckError, match="threads must be a positive integer or auto, got 0"):
        check_threads(0)
    assert check_loss(None) is None and check_loss("model") == "model"
    with pytest.raises(CoordCheckError, match="loss must be null"):
        check_loss("mse")
