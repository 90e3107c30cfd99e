"""JSON numbers as grammar: bounded digit counts, and integer and number ranges.

Unbounded digits let a small model write ``1111…`` until ``max_tokens`` runs out, so every
number has a documented cap: an integer has at most 19 digits (what an int64 holds) and a sign;
a number has at most 19 integer digits, 16 fraction digits and a two-digit exponent. Bounds
(``minimum``, ``maximum`` and their exclusive forms) are enforced digit by digit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .ebnf import EMPTY, Expr, GrammarError, Lit, alt, chars, opt, repeat, seq

INT_DIGITS = 19
FRACTION_DIGITS = 16
EXPONENT_DIGITS = 2
MAX_INT = 10**INT_DIGITS - 1

DIGIT = chars("09")
NONZERO = chars("19")


def integer_range(low: int | None, high: int | None) -> Expr:
    """Integers in ``[low, high]`` without leading zeros; an open side stops at 19 digits."""
    lo = -MAX_INT if low is None else max(low, -MAX_INT)
    hi = MAX_INT if high is None else min(high, MAX_INT)
    if lo > hi:
        raise GrammarError(f"no integer lies between {low} and {high}")
    parts: list[Expr] = []
    if hi >= 0:
        start = max(lo, 0)
        if start == 0:
            parts.append(Lit("0"))
            start = 1
        if start <= hi:
            parts.append(_positive(start, hi))
    if lo < 0:
        parts.append(seq(Lit("-"), _positive(max(1, -hi), -lo)))
    return alt(*parts)


def free_number() -> Expr:
    """Any JSON number within the digit caps."""
    integer = alt(Lit("0"), seq(NONZERO, repeat(DIGIT, 0, INT_DIGITS - 1)))
    fraction = opt(seq(Lit("."), repeat(DIGIT, 1, FRACTION_DIGITS)))
    exponent = opt(seq(chars("e", "E"), opt(chars("+", "-")), repeat(DIGIT, 1, EXPONENT_DIGITS)))
    return seq(opt(Lit("-")), integer, fraction, exponent)


def number_range(low: float | None, high: float | None, low_exclusive: bool, high_exclusive: bool) -> Expr:
    """JSON numbers between the bounds, written without an exponent.

    Bounds that are not whole numbers are tightened to the nearest whole number inside the
    range (every number written still lies within the schema's bounds).
    """
    lo, lo_ex = _whole(low, low_exclusive, math.ceil)
    hi, hi_ex = _whole(high, high_exclusive, math.floor)
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_ex or hi_ex))):
        raise GrammarError(f"this server cannot write a number between {low} and {high}")
    parts: list[Expr] = []
    if hi is None or hi > 0 or (hi == 0 and not hi_ex):
        start = max(lo, 0) if lo is not None else 0
        parts += _magnitudes(start, hi, lo_ex if lo is not None and lo >= 0 else False, hi_ex)
    if lo is None or lo < 0:
        # v = -m with m > 0; m = 0 is written (or excluded) by the non-negative side.
        below_zero = hi is not None and hi < 0
        m_lo = -hi if below_zero and hi is not None else 0
        negatives = _magnitudes(m_lo, None if lo is None else -lo, hi_ex if below_zero else True, lo_ex)
        if negatives:
            parts.append(seq(Lit("-"), alt(*negatives)))
    return alt(*parts)


def _whole(bound: float | None, exclusive: bool, towards: Callable[[float], int]) -> tuple[int | None, bool]:
    if bound is None:
        return None, False
    if not math.isfinite(bound):
        raise GrammarError(f"a bound must be a finite number, got {bound}")
    if float(bound).is_integer():
        return int(bound), exclusive
    return towards(bound), False


def _magnitudes(low: int, high: int | None, low_exclusive: bool, high_exclusive: bool) -> list[Expr]:
    """Non-negative numbers m with ``low <= m <= high`` (strict where exclusive), as alternatives."""
    any_fraction = opt(seq(Lit("."), repeat(DIGIT, 1, FRACTION_DIGITS)))
    nonzero_fraction = seq(Lit("."), repeat(DIGIT, 0, FRACTION_DIGITS - 1), NONZERO)
    zero_fraction = opt(seq(Lit("."), repeat(Lit("0"), 1, FRACTION_DIGITS)))
    if high is not None and high > MAX_INT:
        high, high_exclusive = MAX_INT, False
    if low > MAX_INT or (high is not None and low > high):
        return []
    if high is not None and low == high:
        return [] if low_exclusive or high_exclusive else [seq(Lit(str(low)), zero_fraction)]
    parts = [seq(Lit(str(low)), nonzero_fraction if low_exclusive else any_fraction)]
    inner_high = MAX_INT if high is None else high - 1
    if low + 1 <= inner_high:
        parts.append(seq(_positive(low + 1, inner_high), any_fraction))
    if high is not None and not high_exclusive:
        parts.append(seq(Lit(str(high)), zero_fraction))
    return parts


def _positive(low: int, high: int) -> Expr:
    """Integers ``1 <= low <= n <= high``, grouped by their number of digits."""
    a, b = str(low), str(high)
    if len(a) == len(b):
        return _same_length(a, b)
    parts = [_same_length(a, "9" * len(a))]
    if len(b) - len(a) >= 2:
        parts.append(seq(NONZERO, repeat(DIGIT, len(a), len(b) - 2)))
    parts.append(_same_length("1" + "0" * (len(b) - 1), b))
    return alt(*parts)


def _digits(low: int, high: int) -> Expr:
    return Lit(str(low)) if low == high else chars((str(low), str(high)))


def _same_length(low: str, high: str) -> Expr:
    """Digit strings of one length between ``low`` and ``high`` (leading zeros allowed inside)."""
    if low == high:
        return Lit(low)
    common = 0
    while low[common] == high[common]:
        common += 1
    prefix, low, high = Lit(low[:common]), low[common:], high[common:]
    rest = len(low) - 1
    if rest == 0:
        return seq(prefix, _digits(int(low), int(high)))
    low_rest_zero = low[1:] == "0" * rest
    high_rest_nine = high[1:] == "9" * rest
    first_full = int(low[0]) + (0 if low_rest_zero else 1)
    last_full = int(high[0]) - (0 if high_rest_nine else 1)
    parts: list[Expr] = []
    if not low_rest_zero:
        parts.append(seq(Lit(low[0]), _same_length(low[1:], "9" * rest)))
    if first_full <= last_full:
        parts.append(seq(_digits(first_full, last_full), repeat(DIGIT, rest, rest)))
    if not high_rest_nine:
        parts.append(seq(Lit(high[0]), _same_length("0" * rest, high[1:])))
    return seq(prefix, alt(*parts)) if parts else EMPTY
