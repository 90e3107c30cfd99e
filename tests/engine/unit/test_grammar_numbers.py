"""Numbers in grammars: integer ranges are exact, and every number has bounded digits."""

from __future__ import annotations

import json
import random

import pytest

from genmesh.engine.grammar.ebnf import Expr, Grammar, GrammarError
from genmesh.engine.grammar.numbers import FRACTION_DIGITS, INT_DIGITS, free_number, integer_range, number_range
from support.grammar_walk import matches, sample


def grammar(expr: Expr) -> Grammar:
    g = Grammar()
    g.add("root", expr)
    return g


@pytest.mark.parametrize(
    ("low", "high"), [(0, 30), (-123, 4567), (7, 7), (-50, -3), (95, 1005), (1, 99), (-9, 0), (100, 100000)]
)
def test_integer_ranges_are_exact(low: int, high: int) -> None:
    g = grammar(integer_range(low, high))
    for n in range(min(low, 0) - 30, max(high, 0) + 30):
        if abs(n) > 12000 and not (n - 50 < low or n + 50 > high):
            continue
        assert matches(g, str(n)) == (low <= n <= high), n
    for bad in ("-0", "007", "+5", "01", " 5", "5.0"):
        assert not matches(g, bad)


def test_open_integers_stop_at_19_digits() -> None:
    g = grammar(integer_range(None, None))
    assert matches(g, "9" * INT_DIGITS)
    assert matches(g, "-" + "9" * INT_DIGITS)
    assert not matches(g, "1" * (INT_DIGITS + 1))
    assert matches(g, "0")
    assert not matches(g, "-0")


def test_empty_integer_range_is_refused() -> None:
    with pytest.raises(GrammarError):
        integer_range(5, 4)


def test_free_numbers_have_bounded_digits() -> None:
    g = grammar(free_number())
    for ok in ("0", "-1.5", "3.25e-7", "12E+99", "1" * INT_DIGITS + "." + "5" * FRACTION_DIGITS):
        assert matches(g, ok), ok
    for bad in ("1" * (INT_DIGITS + 1), "1." + "5" * (FRACTION_DIGITS + 1), "1e123", "01", ".5", "1.", "NaN"):
        assert not matches(g, bad), bad


@pytest.mark.parametrize(
    ("low", "high", "low_ex", "high_ex"),
    [
        (0, 1, False, False),
        (0, 1, True, True),
        (-5, 5, False, True),
        (-3, -1, True, False),
        (0, None, True, False),
        (None, 0, False, True),
        (None, -2, False, False),
        (0.5, 10.5, False, False),
        (-1.5, 2, True, False),
    ],
)
def test_number_ranges_only_write_numbers_inside(
    low: float | None, high: float | None, low_ex: bool, high_ex: bool
) -> None:
    g = grammar(number_range(low, high, low_ex, high_ex))
    rng = random.Random(7)
    for _ in range(400):
        value = json.loads(sample(g, rng))
        assert low is None or (value > low if low_ex else value >= low), value
        assert high is None or (value < high if high_ex else value <= high), value


def test_number_range_edges() -> None:
    unit = grammar(number_range(0, 1, False, False))
    for ok in ("0", "1", "0.5", "1.000", "0.0001"):
        assert matches(unit, ok), ok
    for bad in ("1.01", "-0.1", "2", "1e0"):
        assert not matches(unit, bad), bad
    open_unit = grammar(number_range(0, 1, True, True))
    assert matches(open_unit, "0.5")
    for bad in ("0", "0.000", "1", "1.0"):
        assert not matches(open_unit, bad), bad
    with pytest.raises(GrammarError):
        number_range(0.2, 0.8, False, False)
    with pytest.raises(GrammarError):
        number_range(1, 1, True, False)
