"""A bounded, coalescing hand-over from the output processor to one request's consumer.

The engine produces a step's outputs whether or not a request's consumer (an HTTP stream
writing to a slow client) has taken the last ones. A queue would grow without bound; the
collector holds at most one pending item and merges each new one into it (vLLM v1's
``RequestOutputCollector``), so a slow consumer receives fewer, larger deltas and memory per
request stays bounded by the request's own output.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Collector(Generic[T]):
    def __init__(self, merge: Callable[[T, T], T]) -> None:
        self._merge = merge
        self._pending: T | None = None
        self._ready = asyncio.Event()

    def put(self, item: T) -> None:
        """Never blocks: the item waits, merged into whatever is still waiting."""
        self._pending = item if self._pending is None else self._merge(self._pending, item)
        self._ready.set()

    async def get(self) -> T:
        """Everything put since the last ``get``, as one item."""
        while self._pending is None:
            self._ready.clear()
            await self._ready.wait()
        item, self._pending = self._pending, None
        self._ready.clear()
        return item

    @property
    def pending(self) -> bool:
        return self._pending is not None
