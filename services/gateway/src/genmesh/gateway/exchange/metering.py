"""What an exchange's end records: its status and latencies (metrics, the console's activity, its
span's attributes, one log line) and the tokens it is charged (the key's TPM window and usage,
``genmesh_gateway_tokens_total``).

Every reply is charged, whatever its size: its own ``usage`` when the relay read it (a unary
reply of any size: ``genmesh.relay.relay_unary``), else an estimate (``estimate``), so a reply the
upstream produced is never free. Fail closed: the prompt as its request's bytes over
``BYTES_PER_TOKEN``, the completion as the request's output-token bound (``max_completion_tokens``,
``max_tokens``, ...: ``genmesh.protocol.common.OUTPUT_TOKEN_LIMITS``), else as the reply's bytes
over ``BYTES_PER_TOKEN`` (none for embeddings). A refusal (4xx/5xx) without usage is charged
nothing, as OpenAI bills none. A batch line is charged once per line (``ChargeOnce``): the first of
its runs to end with a reply is charged, one that ran twice (its lease lapsed) or was preempted is
not charged again.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry.trace import Span, StatusCode

from genmesh.protocol.common import output_token_limit
from genmesh.protocol.server.tracing import usage_attributes
from genmesh.relay import Outcome, UpstreamResponse

from ..admission.auth import ApiKey
from ..admission.ratelimit import Limiter
from ..admission.tickets import Ticket
from ..console.activity import Activity
from ..metrics import GatewayMetrics

log = logging.getLogger("genmesh.gateway.http")

BYTES_PER_TOKEN = 4  # a token is about four bytes of English text or JSON (OpenAI's rule of thumb)


@dataclass(frozen=True)
class ChargeOnce:
    """A batch line's charge, recorded in its batch (``charged``: a SET of line indexes) so that a
    line that runs again is not charged again; ``ttl_ms``: the batch's keys' TTL."""

    charged: str
    idx: int
    ttl_ms: int


@dataclass(frozen=True)
class Request:
    """What the charge of a request needs from it: its size, its output limit, whether it embeds."""

    size: int
    max_tokens: int | None
    embeddings: bool

    @classmethod
    def of(cls, raw: bytes, body: dict[str, Any], embeddings: bool) -> Request:
        return cls(len(raw), output_token_limit(body), embeddings)


class Meters(Protocol):
    """Where an exchange's end is recorded (the gateway's state satisfies it)."""

    @property
    def metrics(self) -> GatewayMetrics: ...
    @property
    def activity(self) -> Activity: ...
    @property
    def limiter(self) -> Limiter: ...


@dataclass(frozen=True)
class Ended:
    """What ``record`` needs of an exchange: its path and times, its charge's inputs and its trace."""

    path: str
    started: float
    first_output: float | None  # a stream's first relayed chunk
    request: Request | None  # None: it never got on its way
    charge_once: ChargeOnce | None  # a batch line
    span: Span | None
    traced: dict[str, Any] | None  # the span's attributes gathered so far (None: not traced)


def end_trace(span: Span | None, traced: dict[str, Any] | None) -> None:
    """The gathered attributes onto the span, before it ends (none once it has: a request cut off
    finishes after its span)."""
    if span is not None and traced:
        if getattr(span, "end_time", None) is None:
            span.set_attributes(traced)
        traced.clear()


def estimate(request: Request, out: Outcome) -> tuple[int, int]:
    """Tokens charged for a reply whose usage was not read (fail closed: never zero)."""
    prompt = max(1, math.ceil(request.size / BYTES_PER_TOKEN))
    if request.embeddings:
        return prompt, 0
    if request.max_tokens is not None:
        return prompt, request.max_tokens
    return prompt, math.ceil(out.reply_bytes / BYTES_PER_TOKEN)


def tokens_to_charge(request: Request, out: Outcome, status: int) -> tuple[int, int]:
    if out.usage_seen:
        return out.prompt_tokens, out.completion_tokens
    if 200 <= status < 300:
        return estimate(request, out)
    return 0, 0


def _observe_latency(metrics: GatewayMetrics, ex: Ended, model: str, out: Outcome) -> None:
    """TTFT, inter-token latency and end-to-end latency of a successful reply, as the client saw them."""
    now = time.monotonic()
    metrics.e2e.labels(model).observe(now - ex.started)
    if out.first_token_at is not None:
        metrics.ttft.labels(model).observe(out.first_token_at - ex.started)
        if out.completion_tokens > 1:
            metrics.tpot.labels(model).observe((now - out.first_token_at) / (out.completion_tokens - 1))


async def record(
    st: Meters,
    ex: Ended,
    key: ApiKey,
    ticket: Ticket,
    resp: UpstreamResponse,
    out: Outcome,
    upstream: str,
    *,
    completed: bool,
) -> None:
    """The end of the exchange ``ex``: its status, latencies and tokens (the slot is given back first)."""
    route = ticket.route
    if not completed:
        status = "504" if out.error == "reply timeout" else "499"
    else:
        status = str(resp.status) if out.error is None else "502"
    st.metrics.requests.labels(route.name, status).inc()
    ttft = None if ex.first_output is None else ex.first_output - ex.started
    st.activity.finished(route.name, int(status), out.completion_tokens, ticket.waited_s(), ttft)
    if status == "200":
        _observe_latency(st.metrics, ex, route.name, out)
    prompt, completion = (0, 0) if ex.request is None else tokens_to_charge(ex.request, out, resp.status)
    if ex.traced is not None:
        attrs = ex.traced
        attrs["genmesh.upstream"] = upstream
        attrs.update(usage_attributes(prompt, completion))
        if out.first_token_at is not None:
            attrs["genmesh.time_to_first_token_s"] = out.first_token_at - ex.started
        if not completed:  # spawned: the span may have ended already (then this is not seen)
            end_trace(ex.span, ex.traced)
        if out.error is not None and ex.span is not None:
            ex.span.set_status(StatusCode.ERROR, out.error)
    if prompt or completion:
        once = ex.charge_once
        if once is None:
            await st.limiter.account(key, prompt, completion)
        elif completed:  # a batch line cut short (preempted) runs again, and is charged then
            await st.limiter.account_once(key, prompt, completion, once.charged, once.idx, once.ttl_ms)
    if log.isEnabledFor(logging.INFO):
        log.info(
            "%s %s -> %s status=%s queued=%d wait_ms=%d total_ms=%d tokens=%d/%d%s",
            ex.path,
            route.name,
            upstream,
            status,
            ticket.position,
            int(ticket.waited_s() * 1000),
            int((time.monotonic() - ex.started) * 1000),
            prompt,
            completion,
            "" if out.usage_seen or not (prompt or completion) else " (estimated)",
        )
