"""JSON strings and counted repetition, in the forms OpenVINO GenAI's grammar engine runs fast.

Measured on the default model (``/work`` notes in the issue's closing note): a counted
repetition of anything but a plain character class costs 30-900 ms per generated token, and a
counted repetition of a class costs ~14 ms of compile time per count (inside the engine's step,
once per distinct grammar). So:

- an unbounded string is right-recursive, with every JSON escape;
- a string with ``maxLength`` is a run of plain characters (no escapes), its count split in
  two levels (``(c{16}){0,15} c{0,15}``) when it is long;
- a capped free string (JSON mode) is plain characters, or runs of them between escapes.
"""

from __future__ import annotations

import math

from .ebnf import Expr, Grammar, Lit, Ref, alt, chars, repeat, seq

PLAIN = chars(("\x00", "\x1f"), '"', "\\", negated=True)
QUOTE = Lit('"')
SMALL_COUNT = 32  # counts up to this are written as they are
RUN = 32  # plain characters between two escapes in a capped string
REST = "_json_string_rest"  # the rest of an unbounded string, up to and with its closing quote


def escape_rule(g: Grammar) -> Ref:
    if "_json_escape" not in g.rules:
        hex_digit = chars("09", "af", "AF")
        g.add(
            "_json_escape",
            seq(Lit("\\"), alt(chars('"', "\\", "/", "b", "f", "n", "r", "t"), seq(Lit("u"), repeat(hex_digit, 4, 4)))),
        )
    return Ref("_json_escape")


def unbounded_string(g: Grammar) -> Ref:
    """Any JSON string."""
    if "_json_string" not in g.rules:
        rest = Ref(REST)
        g.add(REST, alt(QUOTE, seq(PLAIN, rest), seq(escape_rule(g), rest)))
        g.add("_json_string", seq(QUOTE, rest))
    return Ref("_json_string")


def bounded_string(g: Grammar, low: int, high: int | None) -> Expr:
    """A JSON string of ``low`` to ``high`` characters; with a ``high`` bound, without escapes."""
    if high is not None:
        return seq(QUOTE, counted(PLAIN, low, high), QUOTE)
    whole = unbounded_string(g)
    return seq(QUOTE, counted(PLAIN, low, low), Ref(REST)) if low else whole


def capped_string(g: Grammar, cap: int) -> Expr:
    """A JSON string of at most ``cap`` characters: plain ones, or escapes with at most 32
    plain characters between two of them."""
    plain = seq(QUOTE, counted(PLAIN, 0, cap), QUOTE)
    run = repeat(PLAIN, 0, min(RUN, cap))
    escapes = cap // (RUN + 1)
    if escapes < 1:
        return plain
    return alt(plain, seq(QUOTE, repeat(seq(run, escape_rule(g)), 1, escapes), run, QUOTE))


def counted(item: Expr, low: int, high: int) -> Expr:
    """``item{low,high}``, split in two levels when the counts are large (same language)."""
    if high < low:
        return repeat(item, low, high)  # raises
    exact = _exactly(item, low)
    span = high - low
    if span <= SMALL_COUNT:
        return seq(exact, repeat(item, 0, span))
    chunk = math.isqrt(span)
    whole, rest = divmod(span, chunk)
    block = repeat(item, chunk, chunk)
    short = seq(repeat(block, 0, whole - 1), repeat(item, 0, chunk - 1))
    full = seq(repeat(block, whole, whole), repeat(item, 0, rest))
    return seq(exact, alt(short, full))


def _exactly(item: Expr, count: int) -> Expr:
    if count <= SMALL_COUNT:
        return repeat(item, count, count)
    chunk = math.isqrt(count)
    whole, rest = divmod(count, chunk)
    return seq(repeat(repeat(item, chunk, chunk), whole, whole), repeat(item, rest, rest))


__all__ = ["bounded_string", "capped_string", "counted", "escape_rule", "unbounded_string"]
