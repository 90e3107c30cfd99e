"""Relaying engine replies to our client: unary bodies, and SSE streams event by event.

Streams are not buffered and not re-parsed: the engine's SSE bytes are relayed as they arrive
(the engine already frames them), which keeps the microservice's cost per token to a byte
copy. ``[DONE]`` goes out exactly once. A stream the
engine breaks off (connection cut, timeout, garbage) ends with one error event
``data: {"error": {...}}`` and then ``[DONE]``, never with a bare cut. When our client goes
away, the upstream response is closed, which drops the engine connection and so aborts the
generation there.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import aiohttp
from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from sse_starlette import ServerSentEvent
from starlette.background import BackgroundTask

from genmesh.protocol import OpenAIError, normalise_upstream_error
from genmesh.protocol.asgi import body_limits, unless_disconnected
from genmesh.protocol.inputs import decode_json_object

from ..metrics import MicroserviceMetrics
from ..normalise import EngineCall
from ..state import MicroserviceState
from ..upstream import Reply, Upstream, close, relayed_headers

T = TypeVar("T")
log = logging.getLogger("genmesh.microservice.http")

DONE = "[DONE]"


def state_of(request: Request) -> MicroserviceState:
    state: MicroserviceState = request.app.state.microservice
    return state


def request_id(request: Request) -> str:
    return str(request.state.request_id)


async def json_body(request: Request) -> dict[str, Any]:
    """The body, checked before any work (``decode_json_object``; its size by ``BodyLimitMiddleware``)."""
    return decode_json_object(await request.body(), body_limits(request).max_json_depth)


def _error_json(reply: Reply) -> Response:
    """An engine error reply with its status, as OpenAI error JSON whatever the engine's own shape."""
    if reply.headers.get("content-type", "").startswith("application/json"):
        try:
            body = reply.json()
        except ValueError:
            body = None
        err = normalise_upstream_error(reply.status, body)
        return Response(
            json.dumps(err.body()),
            status_code=err.status,
            headers=relayed_headers(reply),
            media_type="application/json",
        )
    err = OpenAIError(
        f"The LLM engine answered {reply.status}: {reply.text[:200]}",
        status=502,
        type="upstream_error",
        code="engine_error",
    )
    return Response(json.dumps(err.body()), status_code=err.status, media_type="application/json")


async def relay_unary(request: Request, upstream: Upstream, method: str, path: str, body: Any = None) -> Response:
    """One engine request, its whole reply relayed with its status (errors included)."""
    reply = await unless_disconnected(request, upstream.fetch(method, path, request_id(request), body))
    if reply.status >= 400:
        return _error_json(reply)
    return Response(reply.body, status_code=reply.status, headers=relayed_headers(reply))


async def relay_call(request: Request, call: EngineCall) -> Response:
    st = state_of(request)
    if not call.stream:
        return await relay_unary(request, st.upstream, "POST", call.path, call.body)
    started = time.perf_counter()
    response = await unless_disconnected(request, st.upstream.open("POST", call.path, request_id(request), call.body))
    if response.status != 200:
        # The engine refuses before streaming (validation, context length, ...): relay that reply as is.
        return _error_json(await st.upstream.read(response))
    events = _relay_bytes(response, st.upstream, st.metrics, request.url.path, started)
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers=SSE_HEADERS,
        background=BackgroundTask(close, response),
    )


SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
# A chunk carrying generated text: a non-empty chat delta "content" or completion "text".
_TEXT = re.compile(rb'"(?:content|text)":"(?!")')
_DONE = b"data: [DONE]"


def _error_event(err: OpenAIError) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(err.body()), sep="\n")


async def _relay_bytes(
    response: aiohttp.ClientResponse, upstream: Upstream, metrics: MicroserviceMetrics, endpoint: str, started: float
) -> AsyncIterator[bytes]:
    saw_done = False
    saw_text = False
    tail = b""  # end of the previous chunk, so a marker split across two chunks is still seen
    error: OpenAIError | None = None
    content = response.content
    try:
        try:
            while chunk := await content.readany():  # whatever has arrived, b"" at the end
                if saw_done:
                    continue  # drain to the end so the connection can be reused
                window = tail + chunk
                if not saw_text and _TEXT.search(window):
                    saw_text = True
                    metrics.first_token.labels(endpoint=endpoint).observe(time.perf_counter() - started)
                if _DONE in window:
                    saw_done = True
                tail = window[-(len(_DONE) - 1) :]
                yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            if not saw_done:
                error = upstream.failure(exc)
    finally:
        await close(response)
    if saw_done:
        return
    if error is None:
        error = OpenAIError(
            "The LLM engine ended the stream before [DONE]",
            status=502,
            type="upstream_error",
            code="engine_stream_cut",
        )
    metrics.stream_errors.labels(endpoint=endpoint).inc()
    log.warning("stream from the engine failed: %s", error.message)
    yield _error_event(error).encode()
    yield ServerSentEvent(data=DONE, sep="\n").encode()
