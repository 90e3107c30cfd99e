"""Streamed tool-call readers (hermes_stream.py, qwen3coder.py) fed a reply in pieces, and what they
send folded as a client accumulates it; shared by the two readers' tests."""

from __future__ import annotations

from typing import Protocol

from genmesh.engine.openai.hermes_stream import ArgsDelta, CallStart, Piece


class CallStream(Protocol):
    def feed(self, text: str, final: bool = False) -> list[Piece]: ...


def run(stream: CallStream, text: str, cuts: list[int]) -> list[Piece]:
    """``text`` fed to ``stream`` cut at ``cuts``, then the end of the reply."""
    out: list[Piece] = []
    at = 0
    for cut in [*cuts, len(text)]:
        out += stream.feed(text[at:cut])
        at = cut
    return out + stream.feed("", final=True)


def folded(pieces: list[Piece]) -> tuple[str, list[tuple[str, str]]]:
    """The content and the (name, arguments) of each call, as a client accumulates them."""
    content, calls = "", []
    for p in pieces:
        if isinstance(p, str):
            content += p
        elif isinstance(p, CallStart):
            assert p.index == len(calls)
            assert p.id.startswith("call_")
            calls.append([p.name, ""])
        else:
            assert isinstance(p, ArgsDelta)
            assert p.index == len(calls) - 1
            calls[p.index][1] += p.text
    return content, [(n, a) for n, a in calls]
