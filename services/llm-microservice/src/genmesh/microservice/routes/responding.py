"""Relaying engine replies to our client: unary bodies, and SSE streams event by event.

Streams are not buffered: each upstream event is re-emitted as soon as it is parsed
(``httpx-sse`` in, ``sse-starlette`` out). ``[DONE]`` goes out exactly once. A stream the
engine breaks off (connection cut, timeout, garbage) ends with one error event
``data: {"error": {...}}`` and then ``[DONE]``, never with a bare cut. When our client goes
away, the upstream response is closed, which drops the engine connection and so aborts the
generation there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import httpx
from fastapi import Request
from fastapi.responses import Response
from httpx_sse import EventSource, SSEError
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask

from genmesh.protocol import OpenAIError

from ..metrics import MicroserviceMetrics
from ..normalise import EngineCall, parse_json_object
from ..state import MicroserviceState
from ..upstream import Upstream, close, relayed_headers

T = TypeVar("T")
log = logging.getLogger("genmesh.microservice.http")

DONE = "[DONE]"


def state_of(request: Request) -> MicroserviceState:
    state: MicroserviceState = request.app.state.microservice
    return state


def request_id(request: Request) -> str:
    return str(request.state.request_id)


async def json_body(request: Request) -> dict[str, Any]:
    return parse_json_object(await request.body())


class ClientDisconnected(Exception):
    """Our client went away before its reply was ready."""


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; if the client goes away first, cancel it (closing the engine request)."""
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
        log.info("client disconnected; engine request closed")
        raise ClientDisconnected()
    return task.result()


def _error_json(response: httpx.Response) -> Response:
    """An engine error reply, relayed with its status when it is JSON, wrapped as an OpenAI error if not."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return Response(response.content, status_code=response.status_code, headers=relayed_headers(response))
    err = OpenAIError(
        f"The LLM engine answered {response.status_code}: {response.text[:200]}",
        status=502,
        type="upstream_error",
        code="engine_error",
    )
    return Response(json.dumps(err.body()), status_code=err.status, media_type="application/json")


async def relay_unary(request: Request, upstream: Upstream, method: str, path: str, body: Any = None) -> Response:
    """One engine request, its whole reply relayed with its status (errors included)."""
    response = await unless_disconnected(request, upstream.fetch(method, path, request_id(request), body))
    if response.status_code >= 400:
        return _error_json(response)
    return Response(response.content, status_code=response.status_code, headers=relayed_headers(response))


async def relay_call(request: Request, call: EngineCall) -> Response:
    st = state_of(request)
    if not call.stream:
        return await relay_unary(request, st.upstream, "POST", call.path, call.body)
    started = time.perf_counter()
    response = await unless_disconnected(request, st.upstream.open("POST", call.path, request_id(request), call.body))
    if response.status_code != 200:
        # The engine refuses before streaming (validation, context length, ...): relay that reply as is.
        try:
            await response.aread()
        except httpx.HTTPError as exc:
            raise st.upstream.failure(exc) from exc
        finally:
            await close(response)
        return _error_json(response)
    events = _relay_events(response, st.upstream, st.metrics, request.url.path, started)
    return EventSourceResponse(events, sep="\n", ping=15, background=BackgroundTask(close, response))


def _has_text(data: str) -> bool:
    """Whether a chunk carries generated text (chat delta content or completion text)."""
    try:
        chunk = json.loads(data)
        choice = chunk["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return False
    delta = choice.get("delta")
    text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return bool(text)


def _error_event(err: OpenAIError) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(err.body()))


async def _relay_events(
    response: httpx.Response, upstream: Upstream, metrics: MicroserviceMetrics, endpoint: str, started: float
) -> AsyncIterator[ServerSentEvent]:
    saw_done = False
    saw_text = False
    error: OpenAIError | None = None
    try:
        try:
            async for event in EventSource(response).aiter_sse():
                if saw_done:
                    continue  # drain to the end so the connection can be reused
                if event.data == DONE:
                    saw_done = True
                    yield ServerSentEvent(data=DONE)
                    continue
                if not saw_text and _has_text(event.data):
                    saw_text = True
                    metrics.first_token.labels(endpoint=endpoint).observe(time.perf_counter() - started)
                yield ServerSentEvent(data=event.data, event=None if event.event == "message" else event.event)
        except httpx.HTTPError as exc:
            if not saw_done:
                error = upstream.failure(exc)
        except SSEError as exc:
            error = OpenAIError(f"The LLM engine sent a malformed stream: {exc}", status=502, type="upstream_error")
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
    yield _error_event(error)
    yield ServerSentEvent(data=DONE)
