"""Helpers shared by the generation endpoints: disconnect-aware unary replies and SSE streams."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel

from genmesh.protocol import OpenAIError, internal_error
from genmesh.protocol.server.asgi import unless_disconnected
from genmesh.protocol.server.streaming import EventStream
from genmesh.protocol.sse import DONE_EVENT, error_event, event

from ...client.generation import Collected, Event, Generation
from ..loaded_model import EngineState
from ..prompt_logprobs import Prompts, ScoringPlan, scored_results, scored_stream
from ..registry import ModelRegistry

T = TypeVar("T")
log = logging.getLogger("genmesh.engine.http")

# OpenAI's path prefix and OpenVINO Model Server's aliases of it.
API_PREFIXES = ("/v1", "/v3", "/v3/v1")


def add_api_route(router: APIRouter, name: str, handler: Callable[..., Any], method: str = "POST") -> None:
    """Route ``/v1/<name>`` and its OVMS aliases (``/v3/<name>``, ``/v3/v1/<name>``) to ``handler``."""
    for prefix in API_PREFIXES:
        router.add_api_route(f"{prefix}/{name}", handler, methods=[method], response_model=None)


def registry(request: Request) -> ModelRegistry:
    models: ModelRegistry = request.app.state.registry
    return models


def engine(request: Request, model: str | None) -> EngineState:
    """The loaded engine serving ``model`` (404 unknown, 503 loading or failed)."""
    return registry(request).serving(model)


def arrival_time() -> float:
    return time.perf_counter()


SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def sse(events: AsyncIterator[bytes], interval: int = 1) -> EventStream:
    """Stream pre-encoded events. One watcher task per response, no per-event machinery (the body
    goes around the middleware: ``EventStream``): with one event per token per stream this path is
    hot. A client that leaves ends the body iterator (and so aborts the generation). ``interval``
    > 1 (``--stream-interval``): ``grouped``."""
    return EventStream(events if interval <= 1 else grouped(events, interval), SSE_HEADERS)


# An event carrying generated text: a non-empty chat delta "content", completion "text" or Responses "delta".
_TEXT = re.compile(rb'"(?:content|text|delta)":"(?!")')


async def grouped(events: AsyncIterator[bytes], interval: int) -> AsyncIterator[bytes]:
    """The same events, written ``interval`` at a time once the first generated text has gone out
    (at once, for the time to first token); the stream's last group when it ends. Each write is
    one read and one write at every hop behind the engine, so each process's CPU per token falls
    by about ``interval``; the price is burstier output: an event waits for up to ``interval - 1``
    more tokens (vLLM's ``--stream-interval``). The bytes are the same, event for event."""
    source = aiter(events)
    try:
        async for first in source:
            yield first
            if _TEXT.search(first):
                break
        group: list[bytes] = []
        async for item in source:
            group.append(item)
            if len(group) >= interval:
                yield b"".join(group)
                group = []
        if group:
            yield b"".join(group)
    finally:
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()  # closed at a yield here, the generation is abandoned there too


async def guarded(events: AsyncIterator[BaseModel]) -> AsyncIterator[bytes]:
    """Serialise chunks; an error mid-stream becomes a final error event, then ``[DONE]``."""
    try:
        async for item in events:
            yield event(item.model_dump_json(exclude_none=False))
    except OpenAIError as err:
        yield error_event(err)
    except Exception as exc:
        log.exception("stream failed")
        yield error_event(internal_error(f"stream failed: {type(exc).__name__}"))
    yield DONE_EVENT


def json_reply(body: BaseModel) -> Response:
    return Response(body.model_dump_json(), media_type="application/json")


class ReplyWriter(Protocol):
    """How one endpoint kind writes its reply: stream chunks as events come, or the whole reply."""

    def chunks(self, events: AsyncIterator[tuple[int, Event]], prompts: Prompts) -> AsyncIterator[BaseModel]: ...

    def whole(self, results: list[Collected], prompts: Prompts) -> BaseModel: ...


async def generated_reply(
    request: Request,
    st: EngineState,
    ids: list[int],
    scoring: ScoringPlan,
    gens: Sequence[Generation],
    stream: bool,
    writer: ReplyWriter,
) -> Response:
    """The reply of submitted generations: an SSE stream, or the whole reply once every choice ends
    (abandoned if the client disconnects first)."""
    if stream:
        return sse(guarded(scored_stream(st, ids, scoring, gens, writer.chunks)), st.settings.stream_interval)
    results, prompts = await unless_disconnected(request, scored_results(st, ids, scoring, gens))
    return json_reply(writer.whole(results, prompts))
