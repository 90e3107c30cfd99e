"""Relaying engine replies to our client: unary bodies, and SSE streams event by event through
the shared relay (``genmesh.relay``), with this hop's first-token and total deadlines.

A stream's last event (``[DONE]``; a Responses stream's ``response.completed``, ``incomplete`` or
``failed``) goes out exactly once. A stream the engine breaks off (connection cut, timeout,
garbage, the end without its last event) ends with one error event ``data: {"error": {...}}`` and
then ``[DONE]`` (a Responses stream: ``error`` and ``response.failed``), never with a bare cut.
When our client goes away (or stops reading past the send deadline), the upstream response is
closed, which drops the engine connection and so aborts the generation there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response
from opentelemetry.trace import Span, SpanKind

from genmesh.protocol import OpenAIError, normalise_upstream_error
from genmesh.protocol.native_errors import is_native_error
from genmesh.protocol.server.asgi import body_limits, unless_disconnected
from genmesh.protocol.server.inputs import decode_json_object
from genmesh.protocol.server.streaming import EventStream
from genmesh.protocol.server.tracing import current, end_span, start_span, usage_attributes
from genmesh.relay import Failures, Outcome, StreamEnd, UpstreamResponse, relay_stream, relay_unary

from ..metrics import MicroserviceMetrics
from ..normalise import EngineCall
from ..state import MicroserviceState
from ..upstream import Reply, Upstream, relayed_headers

T = TypeVar("T")
CLIENT = SpanKind.CLIENT
log = logging.getLogger("genmesh.microservice.http")


def state_of(request: Request) -> MicroserviceState:
    state: MicroserviceState = request.app.state.microservice
    return state


def request_id(request: Request) -> str:
    return str(request.state.request_id)


async def json_body(request: Request) -> dict[str, Any]:
    """The body, checked before any work (``decode_json_object``; its size by ``BodyLimitMiddleware``)."""
    limits = body_limits(request)
    return decode_json_object(await request.body(), limits.max_json_depth, limits.max_json_containers)


def _error_json(reply: Reply) -> Response:
    """An engine error reply with its status, as OpenAI error JSON whatever the engine's own shape."""
    if reply.headers.get("content-type", "").startswith("application/json"):
        try:
            body = reply.json()
        except ValueError:
            body = None
        if is_native_error(body):  # TEI's or TGI's error: relayed as it is
            return Response(reply.body, status_code=reply.status, headers=relayed_headers(reply.headers))
        err = normalise_upstream_error(reply.status, body)
        return Response(
            json.dumps(err.body()),
            status_code=err.status,
            headers=relayed_headers(reply.headers),
            media_type="application/json",
        )
    err = OpenAIError(
        f"The LLM engine answered {reply.status}: {reply.text[:200]}",
        status=502,
        type="upstream_error",
        code="engine_error",
    )
    return Response(json.dumps(err.body()), status_code=err.status, media_type="application/json")


async def relay_call_unary(
    request: Request, upstream: Upstream, method: str, path: str, body: Any = None, as_is: bool = False
) -> Response:
    """One engine request, its reply relayed with its status as it comes, through the shared relay
    (``genmesh.relay.relay_unary``: one read in hand at a time, never the whole reply); an engine
    error reply becomes OpenAI error JSON (``as_is``: it keeps the engine's own shape, KServe's
    ``{"error": ...}``). The request deadline bounds it all: a reply not begun in time is a 504, one
    cut off after it began ends short (as the gateway relays it)."""
    st = state_of(request)
    deadline_s = st.settings.request_timeout_s
    started = time.monotonic()
    relaying = start_span("microservice.relay", {"url.full": upstream.endpoint + path}, CLIENT)
    try:
        async with asyncio.timeout(deadline_s):
            with current(relaying):
                response = await unless_disconnected(request, upstream.open(method, path, request_id(request), body))
            refusal = await upstream.read(response) if response.status >= 400 else None
    except BaseException as exc:
        end_span(relaying, error=type(exc).__name__)
        if isinstance(exc, TimeoutError):
            raise deadline_error("total", deadline_s) from exc
        raise
    if refusal is not None:
        end_span(relaying, {"http.response.status_code": refusal.status})
        if as_is:
            return Response(refusal.body, status_code=refusal.status, headers=relayed_headers(refusal.headers))
        return _error_json(refusal)
    reply, out = UpstreamResponse(response), Outcome()
    chunks = relay_unary(reply, out, total_deadline=started + deadline_s)
    observed = _observed(chunks, reply, out, st.metrics, request.url.path, 0.0, relaying)
    return EventStream(observed, relayed_headers(response.headers), status=response.status)


def deadline_error(which: str, seconds: float) -> OpenAIError:
    return OpenAIError(
        f"The LLM engine did not send its {'first text' if which == 'first token' else 'whole reply'} "
        f"within {seconds:g} s",
        status=504,
        type="timeout_error",
        code="engine_timeout",
    )


def _failures(st: MicroserviceState) -> Failures:
    s = st.settings

    def timeout(which: str) -> OpenAIError:
        return deadline_error(which, s.first_token_timeout_s if which == "first token" else s.request_timeout_s)

    cut = OpenAIError(
        "The LLM engine ended the stream before its last event",
        status=502,
        type="upstream_error",
        code="engine_stream_cut",
    )
    return Failures(timeout=timeout, broken=st.upstream.failure, cut=cut)


async def relay_call(request: Request, call: EngineCall, end: StreamEnd | None = None) -> Response:
    st = state_of(request)
    if not call.stream:
        return await relay_call_unary(request, st.upstream, "POST", call.path, call.body)
    started = time.monotonic()
    relaying = start_span("microservice.relay", {"url.full": st.upstream.endpoint + call.path}, CLIENT)
    try:
        with current(relaying):
            response = await unless_disconnected(
                request, st.upstream.open("POST", call.path, request_id(request), call.body)
            )
    except BaseException as exc:
        end_span(relaying, error=type(exc).__name__)
        raise
    if response.status != 200:
        # The engine refuses before streaming (validation, context length, ...): relay that reply as is.
        end_span(relaying, {"http.response.status_code": response.status})
        return _error_json(await st.upstream.read(response))
    upstream, out, s = UpstreamResponse(response), Outcome(), st.settings
    events = relay_stream(
        upstream,
        out,
        _failures(st),
        strip_usage=False,
        first_token_deadline=started + s.first_token_timeout_s,
        total_deadline=started + s.request_timeout_s,
        ending=end,
    )
    headers = {**SSE_HEADERS, **{k: v for k in STREAM_HEADERS if (v := response.headers.get(k)) is not None}}
    return EventStream(_observed(events, upstream, out, st.metrics, request.url.path, started, relaying), headers)


SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
STREAM_HEADERS = ("x-genmesh-audio-seconds",)  # a spoken chat stream's audio, transcribed before it began


async def _observed(
    events: AsyncIterator[bytes],
    upstream: UpstreamResponse,
    out: Outcome,
    metrics: MicroserviceMetrics,
    endpoint: str,
    started: float,
    relaying: Span | None = None,
) -> AsyncIterator[bytes]:
    """The relayed events, measured; the engine connection handed back when the stream ended
    cleanly, else closed (which is how the engine learns to stop generating)."""
    finished = False
    try:
        async for event in events:
            if out.first_token_at is not None and started:
                metrics.first_token.labels(endpoint=endpoint).observe(out.first_token_at - started)
                started = 0.0
            yield event
        finished = True
    finally:
        if finished and out.error is None:
            upstream.close()
        else:
            upstream.abort()
        end_span(relaying, usage_attributes(out.prompt_tokens, out.completion_tokens), out.error)
    if out.error is not None:
        metrics.stream_errors.labels(endpoint=endpoint).inc()
        log.warning("stream from the engine failed: %s", out.error)
