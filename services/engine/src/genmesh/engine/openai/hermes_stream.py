"""Hermes/Qwen tool calls read as they stream: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``.

``HermesStream.feed`` takes each new piece of a reply and returns what to send: plain content (never
the ``<tool_call>`` markup), a call's start (its index, id and name) once its name is complete, then its
arguments in fragments, as OpenAI streams them. Arguments are passed on as the model writes them,
holding back only a trailing run of ``}`` and whitespace (the call object's own closing brace may be in
it); when the call closes, the rest of the arguments goes out. A block that is not a call (no
``"name"`` string first, then ``"arguments"``) is content once it closes. A call already started
cannot be taken back: when its JSON turns out broken (a reply cut by ``max_tokens``), its arguments
are what was written; the whole reply's ``tools.parse`` (non-streamed replies) keeps such a block as
content instead.

A reply that *opens* with a bare call object (``{"name": ..., "arguments": ...}`` without the markup,
as Qwen2.5-Coder 1.5B answers greedily) is read as one call too, sent whole once its JSON closes;
what follows it is read as usual. A reply that opens with any other ``{`` is content (held until its
object closes).
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from dataclasses import dataclass

OPEN, CLOSE = "<tool_call>", "</tool_call>"
# A call's head: the object opens with its name, then its arguments' key (JSON string escapes allowed).
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')
_TAIL = re.compile(r"[\s}]*\Z")


def opens_with_call(text: str) -> bool:
    """Whether ``text`` begins with a call object's head (``{"name": "...", "arguments":``)."""
    return _HEAD.match(text) is not None


@dataclass(frozen=True)
class CallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ArgsDelta:
    index: int
    text: str


Piece = str | CallStart | ArgsDelta


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that is a proper start of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


def _final_args(body: str) -> str:
    """A closed call's arguments text: ``body`` (after the head) without the object's closing brace."""
    body = body.rstrip()
    return body[:-1].rstrip() if body.endswith("}") else body


class HermesStream:
    """One choice's reply, split incrementally into content, call starts and argument fragments."""

    def __init__(self) -> None:
        self._buf = ""  # text not yet handed out
        self._block: str | None = None  # inside <tool_call>: the block's text so far
        self._head = 0  # length of the block's head once the call started (0: not started)
        self._sent = 0  # argument characters sent for the started call
        self.calls = 0  # calls started
        self._bare = False  # the block is a bare call object that opened the reply (no markup)
        self._started = False  # anything but whitespace seen

    def feed(self, text: str, final: bool = False) -> list[Piece]:
        self._buf += text
        out: list[Piece] = []
        if not self._started and self._buf.strip():
            self._started = True
            if self._buf.lstrip().startswith("{"):
                self._block, self._buf, self._bare = "", self._buf.lstrip(), True
        while True:
            if self._bare:
                self._feed_bare(out, final)
                if self._bare:
                    return out
                continue
            if self._block is None:
                at = self._buf.find(OPEN)
                if at == -1:
                    keep = 0 if final else partial_suffix(self._buf, OPEN)
                    self._emit(out, self._buf[: len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep :]
                    break
                self._emit(out, self._buf[:at])
                self._block, self._buf = "", self._buf[at + len(OPEN) :]
                continue
            end = self._buf.find(CLOSE)
            if end == -1:
                keep = 0 if final else partial_suffix(self._buf, CLOSE)
                self._block += self._buf[: len(self._buf) - keep]
                self._buf = self._buf[len(self._buf) - keep :]
                self._advance(out, closed=final)
                break
            self._block += self._buf[:end]
            self._buf = self._buf[end + len(CLOSE) :]
            self._advance(out, closed=True, tag=True)
        return out

    def _feed_bare(self, out: list[Piece], final: bool) -> None:
        """The opening bare object, held until its JSON closes (or the reply ends): then a call if it
        is one, else content as written; what follows it is read as usual."""
        block = (self._block or "") + self._buf
        end = None
        if "}" in self._buf or final:  # an object can only close at a brace: no reparse per token
            with contextlib.suppress(json.JSONDecodeError):
                _, end = json.JSONDecoder().raw_decode(block)
        if end is None and not final:
            self._block, self._buf = block, ""
            return
        whole = block if end is None else block[:end]
        self._buf = "" if end is None else block[end:]
        self._block = whole
        self._advance(out, closed=True)
        self._bare = False

    @staticmethod
    def _emit(out: list[Piece], text: str) -> None:
        if text:
            out.append(text)

    def _advance(self, out: list[Piece], closed: bool, tag: bool = False) -> None:
        block = self._block or ""
        if not self._head and (head := _HEAD.match(block)) is not None:
            self._head = head.end()
            out.append(CallStart(self.calls, new_call_id(), json.loads(f'"{head.group(1)}"')))
            self.calls += 1
        if self._head:
            body = block[self._head :]
            args = _final_args(body) if closed else body[: _TAIL.search(body).start()]  # type: ignore[union-attr]
            if len(args) > self._sent:
                out.append(ArgsDelta(self.calls - 1, args[self._sent :]))
                self._sent = len(args)
        if closed:
            if not self._head:  # never a call: the block is content, markup and all
                self._emit(out, block if self._bare else OPEN + block + (CLOSE if tag else ""))
            self._block, self._head, self._sent = None, 0, 0
