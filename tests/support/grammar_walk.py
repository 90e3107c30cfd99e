"""Walk a grammar tree in tests: does it match a string, and random strings it derives."""

from __future__ import annotations

import random
import sys

from genmesh.engine.grammar.ebnf import Alt, Chars, Expr, Grammar, Lit, Ref, Repeat, Seq

_POOL = [chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t", "\x00", "é", "中", "\u2028"]


def matches(grammar: Grammar, text: str) -> bool:
    """Whether ``root`` derives exactly ``text``."""
    memo: dict[tuple[str, int], set[int]] = {}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20 * len(text) + 1000))  # right-recursive rules recurse per character
    try:
        return len(text) in _ends(grammar, Ref("root"), text, 0, memo)
    finally:
        sys.setrecursionlimit(limit)


def _in(chars: Chars, c: str) -> bool:
    inside = any(lo <= ord(c) <= hi for lo, hi in chars.ranges)
    return inside != chars.negated


def _ends(g: Grammar, e: Expr, text: str, pos: int, memo: dict[tuple[str, int], set[int]]) -> set[int]:
    if isinstance(e, Lit):
        return {pos + len(e.text)} if text.startswith(e.text, pos) else set()
    if isinstance(e, Chars):
        return {pos + 1} if pos < len(text) and _in(e, text[pos]) else set()
    if isinstance(e, Seq):
        at = {pos}
        for item in e.items:
            at = {end for p in at for end in _ends(g, item, text, p, memo)}
        return at
    if isinstance(e, Alt):
        return {end for item in e.items for end in _ends(g, item, text, pos, memo)}
    if isinstance(e, Repeat):
        found = {pos} if e.low == 0 else set()
        frontier, count = {pos}, 0
        while frontier and (e.high is None or count < e.high):
            count += 1
            frontier = {end for p in frontier for end in _ends(g, e.item, text, p, memo) if end > p or count <= e.low}
            if count >= e.low:
                found |= frontier
            if count > len(text) + e.low:
                break
        return found
    key = (e.name, pos)
    if key not in memo:
        memo[key] = set()  # left recursion ends here
        memo[key] = _ends(g, g.rules[e.name], text, pos, memo)
    return memo[key]


def sample(grammar: Grammar, rng: random.Random, deep: int = 8) -> str:
    """A random string ``root`` derives (bounded: deep recursion takes the shortest ways out)."""
    out: list[str] = []
    _sample(grammar, Ref("root"), rng, 0, deep, out)
    return "".join(out)


def _sample(g: Grammar, e: Expr, rng: random.Random, depth: int, deep: int, out: list[str]) -> None:
    if isinstance(e, Lit):
        out.append(e.text)
    elif isinstance(e, Chars):
        if e.negated or rng.random() < 0.3:
            candidates = [c for c in _POOL if _in(e, c)]
            if candidates:
                out.append(rng.choice(candidates))
                return
        lo, hi = rng.choice(e.ranges)
        cp = rng.randint(lo, min(hi, lo + 200))
        out.append(chr(cp))
    elif isinstance(e, Seq):
        for item in e.items:
            _sample(g, item, rng, depth, deep, out)
    elif isinstance(e, Alt):
        items = list(e.items)
        if depth >= deep:
            flat = [i for i in items if not isinstance(i, Ref)]
            items = flat or items
        _sample(g, rng.choice(items), rng, depth, deep, out)
    elif isinstance(e, Repeat):
        top = e.low if depth >= deep else e.low + 3
        if e.high is not None:
            top = min(top, e.high)
        for _ in range(rng.randint(e.low, max(e.low, top))):
            _sample(g, e.item, rng, depth, deep, out)
    else:
        _sample(g, g.rules[e.name], rng, depth + 1, deep, out)
