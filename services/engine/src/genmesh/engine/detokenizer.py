"""Incremental detokenisation: token ids in, text deltas out, correct across multi-byte UTF-8.

Each request keeps a short window of recent tokens (re-based every ``REBASE`` tokens, keeping
``CONTEXT`` tokens of left context so leading spaces and merges come out right) and holds back
text while the window ends in an incomplete UTF-8 sequence (U+FFFD).

Decoding is the expensive part (one OpenVINO detokenizer call costs ~0.3 ms whatever its
length), so the windows of every request in an engine step are decoded in one batched call:
``push`` says what to decode, ``accept`` takes the decoded window, and ``BatchDetokenizer``
runs a whole step's worth with at most two batched calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

DecodeBatch = Callable[[list[list[int]]], list[str]]

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    REBASE = 24
    CONTEXT = 6

    def __init__(self) -> None:
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


class BatchDetokenizer:
    """Turn one engine step's new tokens for many requests into text deltas, decoding in batches."""

    def __init__(self, decode_batch: DecodeBatch) -> None:
        self._decode = decode_batch

    def step(self, work: Sequence[tuple[IncrementalDetokenizer, Sequence[int], bool]]) -> list[str]:
        """``work``: (detokenizer, new ids, is final) per request; returns each request's delta."""
        if not work:
            return []
        windows = [d.push(ids) for d, ids, _ in work]
        texts = self._decode(windows)
        deltas = [d.accept(text, final) for (d, _, final), text in zip(work, texts, strict=True)]
        rebase = [(d, w) for d, _, _ in work if (w := d.rebase_window()) is not None]
        if rebase:
            for (d, _), text in zip(rebase, self._decode([w for _, w in rebase]), strict=True):
                d.rebased(text)
        return deltas
