"""Text cut into bounded pieces, whatever its punctuation: a piece ends at a sentence end (``.``, ``!``,
``?``, ``;`` or ``:`` before a space) when one is in reach, else at the last space in reach, else exactly
at the bound. The whitespace at a cut is dropped; every other character is kept, in order."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")
_CUT = re.compile(r"[.!?;:](?=\s)")
_SPACE = re.compile(r"\s")


def pieces(text: str, limit: int) -> list[str]:
    """``text`` packed greedily into pieces of at most ``limit`` characters (none empty, none with
    whitespace at either end)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    out: list[str] = []
    rest = text.strip()
    while len(rest) > limit:
        window = rest[: limit + 1]  # a space just past the bound is a cut within it
        ends = [m.end() for m in _CUT.finditer(window)]
        spaces = [m.start() for m in _SPACE.finditer(window)]
        cut = ends[-1] if ends else spaces[-1] if spaces else limit
        out.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        out.append(rest)
    return out


def sentences(text: str, limit: int) -> list[str]:
    """``text``'s sentences, each a piece of its own; one longer than ``limit`` characters cut into
    ``pieces``."""
    return [p for sentence in _SENTENCE_END.split(text) for p in pieces(sentence, limit)]
