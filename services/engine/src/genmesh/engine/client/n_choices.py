"""The ``n`` choices of one reply: each its own engine request, collected or streamed together."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from genmesh.protocol import Usage
from genmesh.protocol.common import CompletionEnvelope

from .generation import Collected, Event, Generation, Generator, collect

E = TypeVar("E", bound=CompletionEnvelope[Any])


@dataclass(frozen=True)
class Reply:
    """What every chunk of one streamed reply repeats, and what its usage chunk needs."""

    rid: str
    model: str
    created: int
    n: int
    prompt_tokens: int
    include_usage: bool

    def chunk(self, kind: type[E], choices: list[Any], usage: Usage | None = None) -> E:
        """One chunk of this reply (``kind``: the endpoint's chunk model, which names its ``object``)."""
        return kind(id=self.rid, created=self.created, model=self.model, choices=choices, usage=usage)  # type: ignore[call-arg]

    def usage_chunk(self, kind: type[E], completion_tokens: int) -> E:
        """The last chunk, when the client asked for usage: no choices, the whole reply's usage."""
        return self.chunk(kind, [], total_usage(self.prompt_tokens, completion_tokens))


def total_usage(prompt_tokens: int, completion_tokens: int) -> Usage:
    """One reply's usage: the prompt once, the completion tokens of every choice."""
    return Usage(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
    )


def usage_of_results(prompt_tokens: int, results: Sequence[Collected]) -> Usage:
    return total_usage(prompt_tokens, sum(r.finished.completion_tokens for r in results))


async def collect_all(generator: Generator, gens: Sequence[Generation]) -> list[Collected]:
    """Every choice's whole result; the first failure cancels (and aborts) the rest."""
    try:
        if len(gens) == 1:
            return [await collect(gens[0].events)]
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(collect(g.events)) for g in gens]
        except ExceptionGroup as group_error:
            raise group_error.exceptions[0] from None
        return [t.result() for t in tasks]
    finally:
        generator.abort(gens)


async def merged(generator: Generator, gens: Sequence[Generation]) -> AsyncIterator[tuple[int, Event]]:
    """Events of all choices as they come, tagged with the choice index."""
    if len(gens) == 1:
        try:
            async for ev in gens[0].events:
                yield 0, ev
        finally:
            generator.abort(gens)
        return
    queue: asyncio.Queue[tuple[int, Event] | tuple[int, BaseException] | tuple[int, None]] = asyncio.Queue()

    async def pump(index: int, events: AsyncIterator[Event]) -> None:
        try:
            async for ev in events:
                queue.put_nowait((index, ev))
        except Exception as exc:
            queue.put_nowait((index, exc))
        else:
            queue.put_nowait((index, None))

    tasks = [asyncio.create_task(pump(i, g.events)) for i, g in enumerate(gens)]
    try:
        open_streams = len(tasks)
        while open_streams:
            index, item = await queue.get()
            if item is None:
                open_streams -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        generator.abort(gens)
