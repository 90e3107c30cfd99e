"""``Exchange``: one completion request's way through the gateway -- authenticate, per-key limits,
a slot lease (maybe after waiting in Redis), the upstream (a connect failure is retried on another
upstream: ``dispatch.py``), the relay, release and metering (``metering.py``). ``routes/completions.py`` serves
clients' requests with it, ``routes/responses.py`` extends it, and the batch runner
(``runner/line.py``) serves each batch line with it from inside the gateway (``Exchange.call``).

One watcher task per request reads the ASGI ``receive`` channel; when the client goes it cancels
the request's task, wherever it is (queued, connecting, relaying), and the clean-up releases the
slot and closes the upstream connection so that the engine aborts.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from typing import Any

import orjson
from opentelemetry.trace import Span, StatusCode
from starlette.types import Message, Receive, Send

from genmesh.protocol import OpenAIError, internal_error
from genmesh.protocol.server.inputs import decode_json_object
from genmesh.protocol.server.tracing import request_attributes, trace_headers, tracing
from genmesh.relay import DONE_EVENT, Outcome, StreamEnd, UpstreamResponse, error_event, relay_unary

from ..admission.auth import ApiKey, resolve_priority
from ..admission.tickets import Ticket
from ..redis.client import RedisUnavailable
from ..replies import bad_gateway, prepare_body, response_headers
from ..routing import failover
from ..routing.affinity import prefix_of
from ..routing.config import ModelRoute
from ..routing.upstreams import Upstream
from ..state import GatewayState
from . import metering
from .audio import check_input_audio, meter_audio
from .blame import blames_request
from .body import read_body
from .dispatch import EMBEDDINGS_PATH, StreamedBody, connect, relay_from, reply_deadline, route_of
from .errors import ClientGone, admission_error, authenticate

log = logging.getLogger("genmesh.gateway.http")

_JSON = (b"content-type", b"application/json")
CHAT_PATH = "/v1/chat/completions"


def _nothing() -> None:
    pass


class Exchange:
    """One request's way through the gateway."""

    def __init__(self, st: GatewayState, path: str, receive: Receive, send: Send, rid: str) -> None:
        self.st = st
        self.path = path
        self.receive = receive
        self._send = send
        self.rid = rid
        self.rid_header = (b"x-request-id", rid.encode("latin-1"))
        self.max_body = st.settings.max_body_bytes  # the most bytes its body may have
        self.started = time.monotonic()
        self.first_output: float | None = None  # a stream's first relayed chunk: its time to first token
        self.response_started = False
        self.finished = False  # the last body message is about to go: a disconnect now is the normal end
        self.gone = False
        self.leg: tuple[UpstreamResponse | None, Upstream | None] = (None, None)  # the upstream relaying now
        # tracing (trace): the request's span, its attributes gathered here and set once at its end (one
        # lock and one pass in the SDK), and the headers that carry its context to the upstream
        self.span: Span | None = None
        self.traced: dict[str, Any] | None = None  # None: not traced, or not sampled
        self.own_headers = [self.rid_header]
        self.limits_done = self.started  # when the key's limits let it on to the queue
        self.request: metering.Request | None = None  # what its charge needs (once it is on its way)
        self.charge_once: metering.ChargeOnce | None = None  # a batch line: charged once per line
        self.limited = False  # the key's limits have counted it (its RPM included)
        self.held: tuple[Ticket, int] | None = None  # a slot taken before the body was read, and its upstream
        self.admitted: Callable[[], None] = _nothing  # tells the server the request is admitted (routes set it)

    def trace(self, span: Span | None) -> None:
        """Trace the request in ``span`` (its SERVER span, or a batch line's root; None: tracing off)."""
        self.span = span
        if span is not None:
            self.own_headers = [self.rid_header, *trace_headers(span)]
            if span.is_recording():
                self.traced = {}

    def end_trace(self) -> None:
        """Its gathered attributes onto its span (``metering.end_trace``)."""
        metering.end_trace(self.span, self.traced)

    def ended(self) -> metering.Ended:
        """What its metering needs of it, at its end."""
        return metering.Ended(
            self.path, self.started, self.first_output, self.request, self.charge_once, self.span, self.traced
        )

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.response_started = True
            if self.traced is not None:
                status = int(message["status"])
                self.traced["http.response.status_code"] = status
                if status >= 500 and self.span is not None:
                    self.span.set_status(StatusCode.ERROR)
        await self._send(message)

    def error_reply(self, err: OpenAIError) -> tuple[int, bytes]:
        """A refusal's status and body (subclasses: another API's error shape)."""
        return err.status, orjson.dumps(err.body())

    async def send_error(self, err: OpenAIError) -> None:
        if self.response_started:
            return
        status, body = self.error_reply(err)
        headers = [_JSON, (b"content-length", b"%d" % len(body)), self.rid_header]
        headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in err.headers.items()]
        self.finished = True
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})

    async def run(self, authorization: str | None, priority_header: str | None) -> None:
        """Serve a client's request; admission comes before its bytes: the key, then its rate and
        concurrency limits, and only then is the body read (a refusal reads none of it: the server
        closes the connection, ``http_server``)."""
        st = self.st
        route_name = "-"
        try:
            # the admission's Redis work (the key, its limits, a slot or a place in the queue) has
            # redis_timeout_s in all, not counting the time the client takes to send its body
            budget_s = st.settings.redis_timeout_s
            began = time.monotonic()
            try:
                key = await st.admission.store.within(began + budget_s, authenticate(st, authorization))
            except RedisUnavailable as exc:
                raise admission_error(exc, 1) from exc
            tid = uuid.uuid4().hex
            await self._limit(key, tid, began + budget_s)
            budget_s -= time.monotonic() - began
            priority = resolve_priority(key, priority_header, st.settings.default_priority)
            try:
                await self.before_body(key, tid, priority, time.monotonic() + budget_s)
                raw = await self.receive_body()
                body = await self.parse(raw)
                route = await self._route(key, body)
            except BaseException:
                if self.held is not None:
                    st.spawn(st.admission.release(self.held[0]))
                st.spawn(st.limiter.release(key, tid))
                raise
            route_name = route.name
            stream = self.streams(body)
            if self.traced is not None:
                self._annotate(body, route.name, priority, key.tenant, stream)
            await self._serve(key, route, priority, raw, body, stream, time.monotonic() + budget_s, tid, limited=True)
        except OpenAIError as err:
            st.metrics.requests.labels(route_name, str(err.status)).inc()
            st.activity.finished(route_name, err.status)
            await self.send_error(err)
        except ClientGone:
            st.metrics.requests.labels(route_name, "499").inc()
        except Exception as exc:
            log.exception("unhandled error", exc_info=exc)
            st.metrics.requests.labels(route_name, "500").inc()
            st.activity.finished(route_name, 500)
            await self.send_error(internal_error(f"internal error: {type(exc).__name__}"))

    async def before_body(self, key: ApiKey, ticket_id: str, priority: int, admit_by: float) -> None:
        """What the request takes before its body is read, past its key's limits (an upload: its slot)."""

    async def receive_body(self) -> bytes:
        """The body, once the request is admitted (the server then gives an upload its full time)."""
        self.admitted()
        return await read_body(self.receive, self.max_body)

    async def _limit(self, key: ApiKey, ticket_id: str, admit_by: float | None) -> None:
        """The key's rate and concurrency limits: a 429 past them, else ``ticket_id`` counts as running."""
        started = time.monotonic()
        try:
            await self.st.admission.store.within(admit_by, self.st.limiter.acquire(key, ticket_id))
        except RedisUnavailable as exc:
            raise admission_error(exc, 1) from exc
        self.limited = True
        self.admitted()  # an upload's body: the rest of its time from now
        self.limits_done = time.monotonic()
        if self.traced is not None:  # the key's limits: an attribute, not a span of its own (spans cost CPU)
            self.traced["genmesh.admission.duration_s"] = self.limits_done - started

    async def call(
        self,
        key: ApiKey,
        priority: int,
        raw: bytes,
        ticket_id: str | None = None,
        charge_once: metering.ChargeOnce | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        """Serve a request made inside the gateway (a batch line, non-streaming) as ``run`` serves
        one from a client, after authentication: a refusal is raised (``OpenAIError``), the
        reply goes to ``send``; ``ticket_id``: its id in admission (a batch line's lease id, so
        that preemption finds the line holding a slot); ``charge_once``: where its charge is recorded;
        ``body``: ``raw`` parsed and checked already (a batch line, at its batch's creation)."""
        self.charge_once = charge_once
        if body is None:
            body = await self.parse(raw)
        route = await self._route(key, body)
        if self.traced is not None:
            self._annotate(body, route.name, priority, key.tenant, False)
        await self._serve(key, route, priority, raw, body, False, ticket_id=ticket_id)

    async def parse(self, raw: bytes) -> dict[str, Any]:
        """The request's fields, from its body (subclasses: another encoding)."""
        settings = self.st.settings
        body = decode_json_object(raw, settings.max_json_depth, settings.max_json_containers)
        if self.path == CHAT_PATH:
            check_input_audio(body, settings.audio_max_bytes)  # a spoken turn's audio parts
        return body

    def streams(self, body: dict[str, Any]) -> bool:
        """Whether the reply is an SSE stream the gateway reads as it relays it."""
        return bool(body.get("stream") or body.get("streaming"))

    async def _route(self, key: ApiKey, body: dict[str, Any]) -> ModelRoute:
        """``route_of``; a model not served costs the key one request of its RPM all the same."""
        try:
            return route_of(self.st, body, self.path)
        except OpenAIError as err:
            if err.status == 404 and not self.limited:
                await self.st.limiter.count_refused(key.key_id)
            raise

    def _annotate(self, body: dict[str, Any], model: str, priority: int, tenant: str, stream: bool) -> None:
        assert self.traced is not None
        attrs = self.traced
        attrs.update(request_attributes(self.path, body, model))
        attrs["genmesh.queue.priority"] = priority
        attrs["genmesh.tenant"] = tenant
        attrs["genmesh.request.stream"] = stream
        if tracing().record_content:  # opt-in (--trace-content): the prompt as the client sent it
            prompt = body.get("messages", body.get("prompt", body.get("input")))
            attrs["gen_ai.input.messages"] = orjson.dumps(prompt).decode()

    async def body_read(self) -> None:
        """Returns once the body is read (an upload relayed as it comes: once its last piece is in), so
        that the watcher reads the client's channel only then."""

    async def _watch(self, task: asyncio.Task[Any]) -> None:
        await self.body_read()
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                if not self.finished:
                    self.gone = True
                    task.cancel()
                return

    async def _serve(
        self,
        key: ApiKey,
        route: ModelRoute,
        priority: int,
        raw: bytes,
        body: dict[str, Any],
        stream: bool,
        admit_by: float | None = None,
        ticket_id: str | None = None,
        *,
        limited: bool = False,
    ) -> None:
        """``limited``: the key's limits counted ``ticket_id`` already (``run``, before the body)."""
        tid = ticket_id or uuid.uuid4().hex
        if self.held is not None:
            ticket = self.held[0]
        else:
            ticket = Ticket(id=tid, route=route, tenant=key.tenant, priority=priority, admit_by=admit_by)
        if not limited:
            await self._limit(key, tid, admit_by)
        task = asyncio.current_task()
        assert task is not None
        watch = asyncio.ensure_future(self._watch(task))
        try:
            await self._exchange(key, ticket, raw, body, stream)
        except asyncio.CancelledError:
            if not self.gone:
                raise
            task.uncancel()
            if not self.response_started:
                raise ClientGone() from None
        finally:
            watch.cancel()

    async def _give_back(self, key: ApiKey, ticket: Ticket) -> None:
        await self.st.admission.release(ticket)
        await self.st.limiter.release(key, ticket.id)

    async def prepare(
        self, key: ApiKey, raw: bytes, body: dict[str, Any], stream: bool
    ) -> tuple[bytes | StreamedBody, bool]:
        """The body to send upstream and whether a usage chunk the client did not ask for is added."""
        return prepare_body(raw, body, stream)

    def prompt_source(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request whose prompt routes it under prefix-affinity (subclasses add stored history)."""
        return body

    def stream_end(self) -> StreamEnd | None:
        """How a relayed stream ends, and what its failure says (None: chat's and completions')."""
        return None

    def wrap(self, relay: AsyncGenerator[bytes, None], key: ApiKey, status: int) -> AsyncGenerator[bytes, None]:
        """What the client gets of the relayed body (subclasses may rewrite it)."""
        return relay

    async def _exchange(self, key: ApiKey, ticket: Ticket, raw: bytes, body: dict[str, Any], stream: bool) -> None:
        st = self.st
        route = ticket.route
        self.request = metering.Request.of(raw, body, self.path == EMBEDDINGS_PATH)
        try:
            send_body, strip_usage = await self.prepare(key, raw, body, stream)
            ticket.prefix = prefix_of(route, self.prompt_source(body))
            held = self.held[1] if self.held is not None else None
            resp, idx, sent_at = await connect(st, self.path, self.own_headers, ticket, send_body, stream, held=held)
        except BaseException:
            st.spawn(self._give_back(key, ticket))
            raise
        if self.traced is not None:  # the queue and the upstream call: attributes of the one span
            answered = time.monotonic()
            self.traced["genmesh.queue.position"] = ticket.position
            self.traced["genmesh.queue.wait_s"] = max(0.0, (ticket.granted_at or answered) - self.limits_done)
            self.traced["genmesh.upstream.response_s"] = answered - sent_at
        up = st.pool.upstreams(route)[idx]
        self.leg = (resp, up)
        out = Outcome()
        completed = False
        if stream and resp.status == 200:
            relay = relay_from(
                resp, out, strip_usage, sent_at, sent_at + route.request_timeout_s, route, self.stream_end()
            )
            if route.mid_stream_failover and failover.eligible(self.path, body):
                relay = self._failover(relay, ticket, idx, body, out, strip_usage, sent_at + route.request_timeout_s)
        else:
            relay = relay_unary(resp, out, total_deadline=sent_at + route.request_timeout_s)
        relay = self.wrap(relay, key, resp.status)
        try:
            headers = response_headers(resp)
            if resp.status in (429, 502, 503) and resp.header(b"retry-after") is None:
                headers.append((b"retry-after", b"%d" % route.retry_after_s))
            headers += [
                (b"x-queue-position", b"%d" % ticket.position),
                (b"x-queue-wait-ms", b"%d" % int(ticket.waited_s() * 1000)),
                (b"x-upstream", up.name.encode()),
                self.rid_header,
            ]
            try:
                # the route's request timeout bounds the reply too: a client that stops reading
                # holds it (and its slot) no longer than that (http_server aborts its connection)
                async with asyncio.timeout_at(reply_deadline(route, sent_at)):
                    await self.send({"type": "http.response.start", "status": resp.status, "headers": headers})
                    send = self._send  # the body: straight to the server (``send`` watches the start only)
                    async for chunk in relay:
                        if stream:
                            if self.first_output is None:
                                self.first_output = time.monotonic()
                            if (watched := self.leg[1]) is not None:
                                watched.stream_output()
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    self.finished = True
                    await send({"type": "http.response.body", "body": b""})
                completed = True
            except TimeoutError:
                out.error = "reply timeout"
                log.warning("reply not taken within the request timeout (%g s): cut off", route.request_timeout_s)
        finally:
            resp = self.leg[0] or resp  # after a failover: the upstream that took over
            watched = self.leg[1]
            if stream and watched is not None:
                watched.stream_ended(ticket.id)  # watched since _connect sent it
            name = (watched or up).name
            if completed:
                resp.close()
                await self._finish(key, ticket, resp, out, name, completed=True)
            else:
                resp.abort()  # closing mid-stream drops the connection: the upstream aborts
                await relay.aclose()
                st.spawn(self._finish(key, ticket, resp, out, name, completed=False))

    async def _failover(
        self,
        relay: AsyncGenerator[bytes, None],
        ticket: Ticket,
        idx: int,
        body: dict[str, Any],
        out: Outcome,
        strip_usage: bool,
        total_deadline: float,
    ) -> AsyncGenerator[bytes, None]:
        """The stream, continued on another upstream when its own fails mid-way (``failover.py``)."""
        st = self.st
        route = ticket.route
        cont = failover.Continuation(self.path, body)
        exclude: frozenset[int] = frozenset()
        while True:
            async for chunk in relay:
                sent, broke = cont.see_all(chunk)
                if sent:
                    yield sent
                if broke:
                    break
            else:
                if not cont.ended_early(error_event(bad_gateway("upstream stream ended early")) + DONE_EVENT):
                    if cont.legs > 1:
                        cont.account(out)
                    return
            await relay.aclose()
            failed = self.leg[1]
            if not cont.retry() or cont.legs > route.max_failovers or failed is None or blames_request(cont.failure):
                yield cont.failure
                return
            failed.record_failure("stream failed", failed.stream_sent_at(ticket.id), self.rid)
            failed.stream_ended(ticket.id)
            if self.leg[0] is not None:
                self.leg[0].abort()
            self.leg = (self.leg[0], None)
            await st.admission.release(ticket)
            exclude = exclude | {idx}
            try:
                resend = cont.resend()
                resp, idx, sent_at = await connect(st, self.path, self.own_headers, ticket, resend, True, exclude)
            except OpenAIError:
                yield cont.failure  # no other upstream: the failure as it came
                return
            st.metrics.failovers.labels(route.name, failed.name).inc()
            self.leg = (resp, st.pool.upstreams(route)[idx])
            log.warning("stream failed on %s; continuing on %s", failed.name, self.leg[1].name)
            if resp.status != 200:
                yield cont.failure
                return
            out.error = None
            yield b": failover to " + self.leg[1].name.encode() + b"\n\n"  # an SSE comment: clients skip it
            relay = relay_from(resp, out, strip_usage, sent_at, total_deadline, route)

    async def _finish(
        self, key: ApiKey, ticket: Ticket, resp: UpstreamResponse, out: Outcome, upstream: str, *, completed: bool
    ) -> None:
        await self._give_back(key, ticket)
        await metering.record(self.st, self.ended(), key, ticket, resp, out, upstream, completed=completed)
        if out.audio_seconds or out.speech_characters:  # a spoken chat turn's usage said them (also cut short)
            await meter_audio(self.st, key, out.audio_seconds, out.speech_characters)
