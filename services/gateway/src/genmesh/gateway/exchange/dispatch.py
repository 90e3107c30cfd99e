"""Dispatch: the model's route (``route_of``), a slot on an upstream, the request sent there, and its stream relayed.

A connect failure (or a 502/503 before anything was generated, unless it blames the request:
``blame.py``) gives the slot back and tries another upstream of the model, in front of the queue;
a timeout or a failure mid-request is the client's 504 or 502. A streamed body (an upload relayed
as it arrives: ``upload.py``) is tried elsewhere only while none of it has been sent; after that a
failure is the client's 502 with Retry-After, and a fault of the client's own body (past its limit,
gone) is answered as such, never counted against the upstream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol

from genmesh.protocol import OpenAIError, invalid_request, model_not_found
from genmesh.relay import Outcome, StreamEnd, UpstreamConnectError, UpstreamError, UpstreamResponse, relay_stream

from ..admission.tickets import NoUpstream, QueueFull, QueueTimeout, Ticket
from ..redis.client import RedisUnavailable
from ..replies import bad_gateway, failures, upstream_timeout, with_retry_after
from ..routing.config import ModelRoute
from ..state import GatewayState
from .blame import PEEK_BYTES, blames_request
from .errors import ClientGone, admission_error

log = logging.getLogger("genmesh.gateway.http")

EMBEDDINGS_PATH = "/v1/embeddings"


SCORING_PATHS = ("/v1/rerank", "/v1/score")
# the route kinds each kind of endpoint takes: rerank and score also take an embedding model (cosine)
_TAKES = {"chat": ("chat",), "embeddings": ("embeddings",), "rerank": ("rerank", "embeddings")}
_USE = {
    "chat": "/v1/chat/completions",
    "embeddings": "/v1/embeddings",
    "rerank": "/v1/rerank",
    "transcription": "/v1/audio/transcriptions",
    "speech": "/v1/audio/speech",
}


def route_of(st: GatewayState, body: dict[str, Any], path: str, kind: str | None = None) -> ModelRoute:
    """The model's route (``kind``: the endpoint's kind where its path does not say it: TEI's and TGI's)."""
    if kind is None:
        kind = "embeddings" if path == EMBEDDINGS_PATH else "rerank" if path in SCORING_PATHS else "chat"
    model = body.get("model")
    route = st.config.route(model) if isinstance(model, str) else None
    if route is not None:
        if route.kind not in _TAKES[kind]:
            raise invalid_request(
                f"model '{route.name}' is a {route.kind} model: use {_USE[route.kind]}",
                param="model",
                code="model_not_supported",
            )
        return route
    of_kind = [r for r in st.config.models.values() if r.kind in _TAKES[kind]]
    if len(of_kind) == 1 and (model is None or (isinstance(model, str) and model.strip().startswith(("$", "<")))):
        return of_kind[0]  # OPEA clients may leave the model out
    raise model_not_found(str(model))


# How long past the route's request timeout a reply may still be going out: the relay's own
# deadline ends a stream with its failure events, which a client that reads gets within this; a
# client that reads nothing holds the reply past it, and the reply is then cut off (``reply_deadline``).
REPLY_GRACE_S = 0.5


class StreamedBody(Protocol):
    """A request body sent upstream as it comes (``upload.Upload``)."""

    error: BaseException | None  # the client's own fault met while sending it

    def pieces(self) -> AsyncIterator[bytes]: ...

    def replayable(self) -> bool: ...


_UPSTREAM_HEADERS = [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream")]


async def connect(
    st: GatewayState,
    path: str,
    own_headers: list[tuple[bytes, bytes]],
    ticket: Ticket,
    send_body: bytes | StreamedBody,
    stream: bool,
    exclude: frozenset[int] = frozenset(),
    held: int | None = None,
) -> tuple[UpstreamResponse, int, float]:
    """Take a slot and open the upstream response; a connect failure is retried on another upstream
    (``exclude``: upstreams not to try; a failover's starts in front of the queue; ``own_headers``:
    the request's id and trace context; ``held``: the upstream whose slot the ticket holds already,
    taken before its body was read). Returns the response, the upstream's index and when the
    request was sent."""
    route = ticket.route
    front = bool(exclude)
    own = {name for name, _ in own_headers}  # a multipart upload brings its own content-type
    headers = [*(h for h in _UPSTREAM_HEADERS if h[0] not in own), *own_headers]
    rid = next((v.decode("latin-1") for k, v in own_headers if k == b"x-request-id"), "")
    while True:
        if held is not None:
            idx, held = held, None
        else:
            idx = await take_slot(st, ticket, exclude, front)
        up = st.pool.upstreams(route)[idx]
        sent_at = time.monotonic()
        wait_s = route.first_token_timeout_s if stream else route.request_timeout_s
        if stream:
            up.stream_began(ticket.id)  # the upstream's progress is watched from here (upstreams.py)
        try:
            try:
                async with asyncio.timeout(wait_s):
                    body = send_body if isinstance(send_body, bytes) else send_body.pieces()
                    resp = await st.upstream.post(up.url, path, body, headers)
            except BaseException:
                if stream:
                    up.stream_ended(ticket.id)
                raise
        except UpstreamError as exc:
            if not isinstance(send_body, bytes) and isinstance(send_body.error, OpenAIError | ClientGone):
                raise send_body.error from None  # the client's body failed (too large, malformed, gone)
            if not isinstance(exc, UpstreamConnectError):  # the upstream went away mid-request: worth a retry soon
                up.record_failure(type(exc).__name__, sent_at, rid)
                raise with_retry_after(
                    bad_gateway(f"upstream request failed: {type(exc).__name__}"), route.retry_after_s
                ) from exc
            up.record_failure(type(exc).__name__, sent_at, rid)
            await st.admission.release(ticket)
            exclude = exclude | {idx}
            front = True
            st.metrics.retries.labels(route.name).inc()
            log.warning("connect to %s failed (%s); trying another upstream", up.url, exc)
            if not isinstance(send_body, bytes) and not send_body.replayable():
                raise with_retry_after(
                    bad_gateway(f"upstream of model '{route.name}' failed while the upload was sent"),
                    route.retry_after_s,
                ) from exc
            if not st.pool.any_available(route, exclude):
                raise with_retry_after(
                    bad_gateway(f"no upstream of model '{route.name}' could be reached"), route.retry_after_s
                ) from exc
            continue
        except TimeoutError as exc:
            up.record_failure("timeout", sent_at, rid)
            raise upstream_timeout("first token" if stream else "total", wait_s) from exc
        st.metrics.upstream_requests.labels(route.name, up.name).inc()
        if resp.status not in (502, 503):
            up.record_success()
            return resp, idx, sent_at
        if blames_request(await resp.peek(PEEK_BYTES, time.monotonic() + wait_s)):
            return resp, idx, sent_at  # the client's answer (blame.py): relayed, not replayed, not counted
        up.record_failure(f"status {resp.status}", sent_at, rid)
        if not st.pool.any_available(route, exclude | {idx}) or not (
            isinstance(send_body, bytes) or send_body.replayable()
        ):
            return resp, idx, sent_at  # the client gets the upstream's own 502/503
        # nothing was generated: another upstream may serve it (a replica whose engine is down)
        if stream:
            up.stream_ended(ticket.id)
        resp.abort()
        await st.admission.release(ticket)
        exclude = exclude | {idx}
        front = True
        st.metrics.retries.labels(route.name).inc()
        log.warning("%s answered %d; trying another upstream", up.url, resp.status)


async def take_slot(
    st: GatewayState, ticket: Ticket, exclude: frozenset[int] = frozenset(), front: bool = False
) -> int:
    """A slot for ``ticket`` (maybe after waiting in the queue): its upstream's index, or the refusal."""
    try:
        return await st.admission.acquire(ticket, exclude, front)
    except (QueueFull, QueueTimeout, NoUpstream, RedisUnavailable) as exc:
        raise admission_error(exc, ticket.route.retry_after_s) from exc


def reply_deadline(route: ModelRoute, sent_at: float) -> float:
    """When the whole reply must have gone out, whatever the client does: the route's
    ``request_timeout_s`` after the request was sent upstream, and ``REPLY_GRACE_S``."""
    return sent_at + route.request_timeout_s + REPLY_GRACE_S


def relay_from(
    resp: UpstreamResponse,
    out: Outcome,
    strip_usage: bool,
    sent_at: float,
    total_deadline: float,
    route: ModelRoute,
    ending: StreamEnd | None = None,
) -> AsyncGenerator[bytes, None]:
    """A streamed response relayed event by event within the route's first-token and total deadlines."""
    return relay_stream(
        resp,
        out,
        failures(route.first_token_timeout_s, route.request_timeout_s),
        strip_usage=strip_usage,
        first_token_deadline=sent_at + route.first_token_timeout_s,
        total_deadline=total_deadline,
        ending=ending,
    )
