"""Helpers shared by the generation endpoints: disconnect-aware unary replies and SSE streams."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
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
