"""What a streamed speech reply has sent, for the gateway that meters it (issue 55: characters are
charged for what was sent, also when the client leaves).

A streamed speech request that carries ``x-genmesh-speech-id`` (the gateway's id for it, unguessable,
never the client's) is entered here; each chunk's phonemes are counted as its audio is handed to the
connection, and the entry is done when the reply ends, however it ends. Its characters are the input's
share of the phonemes sent (rounded up; all of them once every chunk went): a reply cut after its first
chunk is charged that chunk's share of the text. The gateway asks once, after a reply it did not relay
whole (``wait``); entries are kept ``KEEP_S`` after they are done, at most ``MAX_ENTRIES`` at once (the
oldest are dropped first)."""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field

KEEP_S = 60.0  # how long a finished entry waits for the gateway's question
MAX_ENTRIES = 4096  # the most entries kept (well above the voice's queue, --audio-max-queued)


@dataclass
class Sent:
    """One reply: its input's characters, its phonemes in all and those sent so far."""

    characters: int
    phonemes: int
    phonemes_sent: int = 0
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    ended_at: float = 0.0

    def send(self, phonemes: int) -> None:
        """A chunk of ``phonemes`` is being handed to the connection."""
        self.phonemes_sent += phonemes

    def end(self) -> None:
        self.ended_at = time.monotonic()
        self.ended.set()

    def characters_sent(self) -> int:
        if self.phonemes_sent >= self.phonemes:
            return self.characters
        return math.ceil(self.characters * self.phonemes_sent / self.phonemes)


class SentLedger:
    """The streamed speech replies of this engine, by the gateway's speech id."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, Sent] = OrderedDict()

    def enter(self, speech_id: str, characters: int, phonemes: int) -> Sent:
        self._prune()
        entry = self._entries[speech_id] = Sent(characters, phonemes)
        self._entries.move_to_end(speech_id)
        while len(self._entries) > MAX_ENTRIES:
            self._entries.popitem(last=False)
        return entry

    async def wait(self, speech_id: str, timeout_s: float) -> Sent | None:
        """The entry once its reply has ended (or as it stands after ``timeout_s``); None if unknown."""
        entry = self._entries.get(speech_id)
        if entry is None:
            return None
        try:
            async with asyncio.timeout(timeout_s):
                await entry.ended.wait()
        except TimeoutError:
            pass
        return entry

    def _prune(self) -> None:
        now = time.monotonic()
        stale = [k for k, e in self._entries.items() if e.ended.is_set() and now - e.ended_at > KEEP_S]
        for k in stale:
            del self._entries[k]
