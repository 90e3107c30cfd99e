"""Incremental detokenisation: token ids in, text deltas out, correct across multi-byte UTF-8.

Two step decoders share one interface (``new_request`` and ``step``): ``TableDecoder`` for
byte-level vocabularies (a table lookup and an incremental UTF-8 decoder per request; see
``token_table``), and ``BatchDetokenizer`` for every other tokenizer, described below.

In ``BatchDetokenizer`` each request keeps a short window of recent tokens (re-based every ``REBASE`` tokens, keeping
``CONTEXT`` tokens of left context so leading spaces and merges come out right) and holds back
text while the window ends in an incomplete UTF-8 sequence (U+FFFD).

Decoding is the expensive part (one OpenVINO detokenizer call costs ~0.3 ms whatever its
length), so the windows of every request in an engine step are decoded in one batched call:
``push`` says what to decode, ``accept`` takes the decoded window, and ``BatchDetokenizer``
runs a whole step's worth with at most two batched calls.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .token_table import TokenTable

DecodeBatch = Callable[[list[list[int]], bool], list[str]]

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    REBASE = 24
    CONTEXT = 6

    def __init__(self, skip_special_tokens: bool = True) -> None:
        self.skip_special_tokens = skip_special_tokens
        self._ids: list[int] = []
        self._start = 0
        self._seen = ""  # decoded text of ids[_start:] already emitted
        self._held = False
        self.text = ""

    def push(self, ids: Sequence[int]) -> list[int]:
        """Add new token ids; return the window of ids to decode."""
        self._ids.extend(ids)
        return self._ids[self._start :]

    def accept(self, window: str, final: bool = False) -> str:
        """Take the decoded window; return the new text (held back while mid-character)."""
        self._held = window.endswith(REPLACEMENT) and not final
        if self._held:
            return ""
        delta = window[len(self._seen) :]
        self._seen = window
        self.text += delta
        return delta

    def rebase_window(self) -> list[int] | None:
        """Ids of a shorter window to move to, when the current one has grown long enough."""
        if self._held or len(self._ids) - self._start <= self.REBASE:
            return None
        return self._ids[len(self._ids) - self.CONTEXT :]

    def rebased(self, window: str) -> None:
        self._start = len(self._ids) - self.CONTEXT
        self._seen = window


class StepDecoder(Protocol):
    """Turns one engine step's new tokens for many requests into their text deltas."""

    def new_request(self, skip_special_tokens: bool) -> Any: ...

    def step(self, work: Sequence[tuple[Any, Sequence[int], bool]]) -> list[str]:
        """``work``: (request state, new ids, is final) per request; returns each request's delta."""
        ...


class BatchDetokenizer:
    """Decode a step's windows for all requests in batched tokenizer calls."""

    def __init__(self, decode_batch: DecodeBatch) -> None:
        self._decode = decode_batch

    def new_request(self, skip_special_tokens: bool) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(skip_special_tokens)

    def _decode_grouped(self, detoks: Sequence[IncrementalDetokenizer], windows: list[list[int]]) -> list[str]:
        if all(d.skip_special_tokens for d in detoks) or not any(d.skip_special_tokens for d in detoks):
            return self._decode(windows, detoks[0].skip_special_tokens)
        texts = [""] * len(windows)
        for skip in (True, False):
            idx = [i for i, d in enumerate(detoks) if d.skip_special_tokens is skip]
            for i, text in zip(idx, self._decode([windows[i] for i in idx], skip), strict=True):
                texts[i] = text
        return texts

    def step(self, work: Sequence[tuple[IncrementalDetokenizer, Sequence[int], bool]]) -> list[str]:
        if not work:
            return []
        windows = [d.push(ids) for d, ids, _ in work]
        texts = self._decode_grouped([d for d, _, _ in work], windows)
        deltas = [d.accept(text, final) for (d, _, final), text in zip(work, texts, strict=True)]
        rebase = [(d, w) for d, _, _ in work if (w := d.rebase_window()) is not None]
        if rebase:
            rebased = self._decode_grouped([d for d, _ in rebase], [w for _, w in rebase])
            for (d, _), text in zip(rebase, rebased, strict=True):
                d.rebased(text)
        return deltas


class Utf8Stream:
    """One request's bytes → text, holding back an incomplete UTF-8 sequence until it completes."""

    def __init__(self, table: TokenTable, skip_special_tokens: bool) -> None:
        self._table = table
        self._skip = skip_special_tokens
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, ids: Sequence[int], final: bool) -> str:
        return str(self._utf8.decode(self._table.bytes_of(ids, self._skip), final))


class TableDecoder:
    """Byte-level vocabularies: no tokenizer call at all, a table lookup per token."""

    def __init__(self, table: TokenTable) -> None:
        self.table = table

    def new_request(self, skip_special_tokens: bool) -> Utf8Stream:
        return Utf8Stream(self.table, skip_special_tokens)

    def step(self, work: Sequence[tuple[Utf8Stream, Sequence[int], bool]]) -> list[str]:
        return [d.feed(ids, final) for d, ids, final in work]
