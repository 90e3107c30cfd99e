"""Telling a hung engine core from a busy one, by its progress rather than by its being alive.

A core that deadlocks, spins or is stopped (SIGSTOP) keeps its process and its sockets, so a
``/health`` that only asks "is the process there" stays green while every request waits. The
core reports its progress with every step (steps done, tokens out); the API process samples it.
The core is hung when requests are in flight but neither counter has moved for ``timeout_s``,
or when it has sent nothing at all (not even its idle heartbeat, once a second) for that long.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """What the watchdog sees of a core at one moment."""

    steps: int  # engine steps done since the core started
    tokens: int  # tokens generated since the core started
    in_flight: int  # requests the API process waits on
    silent_s: float  # since the last message of any kind from the core
    unread: bool  # messages are waiting to be read: the API process lags, the core does not


class ProgressWatch:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._progress: tuple[int, int] | None = None
        self._busy = False
        self._since = 0.0  # when progress was last seen, or when work began

    def check(self, now: float, s: Sample) -> str | None:
        """The reason the core is hung, or None. Call it every second or so."""
        progress = (s.steps, s.tokens)
        busy = s.in_flight > 0
        if progress != self._progress or not busy or not self._busy or s.unread:
            self._since = now
        self._progress = progress
        self._busy = busy
        if self.timeout_s <= 0 or s.unread:
            return None
        stalled = max(now - self._since, s.silent_s)
        if busy and stalled >= self.timeout_s:
            return (
                f"no progress for {stalled:.0f} s with {s.in_flight} request(s) in flight "
                f"(steps {s.steps}, tokens out {s.tokens})"
            )
        if s.silent_s >= self.timeout_s:
            return f"no word from the engine core for {s.silent_s:.0f} s"
        return None
