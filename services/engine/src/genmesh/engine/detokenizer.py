"""Incremental detokenisation: token ids in, text deltas out, correct across multi-byte UTF-8.

Each call decodes only a short window of recent tokens (re-based every ``REBASE`` tokens,
keeping ``CONTEXT`` tokens of left context so leading spaces and merges come out right), and
holds back text while the window ends in an incomplete UTF-8 sequence (U+FFFD).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Decode = Callable[[Sequence[int]], str]

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    REBASE = 24
    CONTEXT = 6

    def __init__(self, decode: Decode) -> None:
        self._decode = decode
        self._ids: list[int] = []
        self._start = 0
        self._seen = ""  # decoded text of ids[_start:] already emitted
        self.text = ""

    def add(self, ids: Sequence[int]) -> str:
        self._ids.extend(ids)
        window = self._decode(self._ids[self._start :])
        if window.endswith(REPLACEMENT):
            return ""
        delta = window[len(self._seen) :]
        self._seen = window
        if len(self._ids) - self._start > self.REBASE:
            self._start = len(self._ids) - self.CONTEXT
            self._seen = self._decode(self._ids[self._start :])
        self.text += delta
        return delta

    def flush(self) -> str:
        """The rest of the text at the end of generation, even if it ends mid-character."""
        window = self._decode(self._ids[self._start :])
        delta = window[len(self._seen) :]
        self._seen = window
        self.text += delta
        return delta
