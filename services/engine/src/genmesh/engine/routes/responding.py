"""Helpers shared by the generation endpoints: disconnect-aware unary replies and SSE streams."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel
from sse_starlette import EventSourceResponse, ServerSentEvent

from genmesh.protocol import OpenAIError, internal_error

from ..state import EngineState

T = TypeVar("T")
log = logging.getLogger("genmesh.engine.http")


def engine(request: Request) -> EngineState:
    state: EngineState = request.app.state.engine
    return state


def arrival_time() -> float:
    return time.perf_counter()


class ClientDisconnected(Exception):
    pass


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; if the client goes away first, cancel it (which aborts the generation)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        log.info("client disconnected; generation aborted")
        raise ClientDisconnected()
    return task.result()


def error_event(err: OpenAIError) -> ServerSentEvent:
    return ServerSentEvent(data=err.to_response().model_dump_json())


DONE = ServerSentEvent(data="[DONE]")


def sse(events: AsyncIterator[ServerSentEvent]) -> EventSourceResponse:
    return EventSourceResponse(events, sep="\n", ping=15)


async def guarded(events: AsyncIterator[BaseModel | ServerSentEvent]) -> AsyncIterator[ServerSentEvent]:
    """Serialise chunks; an error mid-stream becomes a final error event, then ``[DONE]``."""
    try:
        async for item in events:
            if isinstance(item, ServerSentEvent):
                yield item
            else:
                yield ServerSentEvent(data=item.model_dump_json(exclude_none=False))
    except OpenAIError as err:
        yield error_event(err)
    except Exception as exc:
        log.exception("stream failed")
        yield error_event(internal_error(f"stream failed: {type(exc).__name__}"))
    yield DONE
