"""Stop strings: find the first one in the generated text and hold back text that might start one."""

from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    def __init__(self, stops: Sequence[str], include_stop: bool = False) -> None:
        self.stops = [s for s in stops if s]
        self.include_stop = include_stop
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.text = ""
        self._sent = 0

    def feed(self, delta: str, final: bool = False) -> tuple[str, bool]:
        """Add new text; return (text safe to send now, whether a stop string was hit)."""
        search_from = max(0, len(self.text) - self.hold)
        self.text += delta
        if self.stops:
            hits = [(i, len(s)) for s in self.stops if (i := self.text.find(s, search_from)) != -1]
            if hits:
                at, length = min(hits)
                cut = at + length if self.include_stop else at
                out = self.text[self._sent : cut]
                self.text = self.text[:cut]
                self._sent = cut
                return out, True
        limit = len(self.text) if final else max(self._sent, len(self.text) - self.hold)
        out = self.text[self._sent : limit]
        self._sent = limit
        return out, False
