"""Regular expressions as grammar, for ``pattern``, string ``format`` and ``guided_regex``.

Python's own regex parser reads the pattern; character classes follow JSON Schema's
(ECMA-262) meaning: ``\\d`` is ``[0-9]``, ``\\w`` is ``[A-Za-z0-9_]``. What a grammar cannot
express (look-around, back-references, word boundaries, case-insensitive matching) is refused.

A pattern is matched whole (``^`` and ``$`` at its ends are implied): a string that matches
whole also contains a match, so it validates under JSON Schema's search semantics too. Inside
a JSON string (``json=True``) every character is written as JSON writes it: ``"`` as ``\\"``,
control characters as escapes.
"""

from __future__ import annotations

import re
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

from .ebnf import MAX_CODEPOINT, Chars, Expr, GrammarError, Lit, alt, repeat, seq

Ranges = list[tuple[int, int]]

_SURROGATES = (0xD800, 0xDFFF)
_DIGIT: Ranges = [(0x30, 0x39)]
_WORD: Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_SPACE: Ranges = [
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
]
# Characters JSON writes escaped inside a string.
_JSON_SPECIAL: Ranges = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]
_JSON_SHORT = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def regex_expr(pattern: str, json: bool, max_repeat: int) -> Expr:
    """The strings ``pattern`` matches whole, as they appear in raw text or inside a JSON string;
    a repetition count above ``max_repeat`` is refused (it costs compile time in the engine's step)."""
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise GrammarError(f"invalid regular expression: {exc}") from exc
    flags = int(parsed.state.flags)
    if flags & re.IGNORECASE:
        raise GrammarError("case-insensitive patterns are not supported")
    return _Converter(json, bool(flags & re.DOTALL), max_repeat).items(list(parsed), True, True)


class _Converter:
    def __init__(self, json: bool, dotall: bool, max_repeat: int) -> None:
        self.json = json
        self.dotall = dotall
        self.max_repeat = max_repeat

    def items(self, items: list[tuple[Any, Any]], at_start: bool, at_end: bool) -> Expr:
        parts: list[Expr] = []
        last = len(items) - 1
        for i, (op, av) in enumerate(items):
            parts.append(self.item(op, av, at_start and i == 0, at_end and i == last))
        return seq(*parts)

    def item(self, op: Any, av: Any, at_start: bool, at_end: bool) -> Expr:
        if op is sre.LITERAL:
            return self.charset([(av, av)])
        if op is sre.NOT_LITERAL:
            return self.charset(_complement([(av, av)]))
        if op is sre.ANY:
            return self.charset(_complement([] if self.dotall else [(0x0A, 0x0A)]))
        if op is sre.IN:
            return self.charset(_class(av))
        if op is sre.BRANCH:
            return alt(*(self.items(list(branch), at_start, at_end) for branch in av[1]))
        if op is sre.SUBPATTERN:
            _group, add_flags, _del_flags, sub = av
            if add_flags & re.IGNORECASE:
                raise GrammarError("case-insensitive patterns are not supported")
            return self.items(list(sub), at_start, at_end)
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", None)):
            low, high, sub = av
            high = None if high is sre.MAXREPEAT else int(high)
            check_repeat(int(low) if high is None else high, self.max_repeat)
            return repeat(self.items(list(sub), False, False), int(low), high)
        if op is getattr(sre, "ATOMIC_GROUP", None):
            return self.items(list(av), at_start, at_end)
        if op is sre.AT:
            if av in (sre.AT_BEGINNING, sre.AT_BEGINNING_STRING) and at_start:
                return Lit("")
            if av in (sre.AT_END, sre.AT_END_STRING) and at_end:
                return Lit("")
            raise GrammarError("anchors and word boundaries are only supported at the ends of a pattern")
        name = str(op).lower().replace("_", " ")
        raise GrammarError(f"regular expressions with {name} are not supported")

    def charset(self, ranges: Ranges) -> Expr:
        ranges = _subtract(_normalise(ranges), [_SURROGATES])
        if not ranges:
            raise GrammarError("a character class in the pattern matches no character")
        if not self.json:
            return Lit(chr(ranges[0][0])) if len(ranges) == 1 and ranges[0][0] == ranges[0][1] else Chars(tuple(ranges))
        plain = _subtract(ranges, _JSON_SPECIAL)
        escaped = [Lit(_json_escape(cp)) for lo, hi in _intersect(ranges, _JSON_SPECIAL) for cp in range(lo, hi + 1)]
        if plain and len(plain) == 1 and plain[0][0] == plain[0][1] and not escaped:
            return Lit(chr(plain[0][0]))
        return alt(*([Chars(tuple(plain))] if plain else []), *escaped)


def check_repeat(count: int, max_repeat: int) -> None:
    if count > max_repeat:
        raise GrammarError(
            f"a repetition count of {count} is above this server's limit of {max_repeat} "
            "(engine setting --structured-max-repeat)"
        )


def _json_escape(cp: int) -> str:
    return _JSON_SHORT.get(cp, f"\\u{cp:04x}")


def _class(items: list[tuple[Any, Any]]) -> Ranges:
    ranges: Ranges = []
    negate = False
    for op, av in items:
        if op is sre.NEGATE:
            negate = True
        elif op is sre.LITERAL:
            ranges.append((av, av))
        elif op is sre.RANGE:
            ranges.append((av[0], av[1]))
        elif op is sre.CATEGORY:
            ranges += _category(av)
        else:
            raise GrammarError(f"character classes with {str(op).lower()} are not supported")
    return _complement(ranges) if negate else _normalise(ranges)


def _category(cat: Any) -> Ranges:
    table = {
        sre.CATEGORY_DIGIT: (_DIGIT, False),
        sre.CATEGORY_NOT_DIGIT: (_DIGIT, True),
        sre.CATEGORY_WORD: (_WORD, False),
        sre.CATEGORY_NOT_WORD: (_WORD, True),
        sre.CATEGORY_SPACE: (_SPACE, False),
        sre.CATEGORY_NOT_SPACE: (_SPACE, True),
    }
    if cat not in table:
        raise GrammarError(f"the character category {str(cat).lower()} is not supported")
    ranges, negate = table[cat]
    return _complement(ranges) if negate else list(ranges)


def _normalise(ranges: Ranges) -> Ranges:
    out: Ranges = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _complement(ranges: Ranges) -> Ranges:
    out: Ranges = []
    start = 0
    for lo, hi in _normalise(ranges):
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CODEPOINT:
        out.append((start, MAX_CODEPOINT))
    return out


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    out: Ranges = []
    for lo, hi in a:
        for blo, bhi in b:
            if max(lo, blo) <= min(hi, bhi):
                out.append((max(lo, blo), min(hi, bhi)))
    return _normalise(out)


def _subtract(a: Ranges, b: Ranges) -> Ranges:
    return _intersect(a, _complement(b))
