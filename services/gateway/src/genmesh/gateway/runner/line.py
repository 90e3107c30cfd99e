"""One batch line sent through the interactive path: limits, admission, routing, relay, metering.

The line is served by the same ``Exchange`` (``exchange/exchange.py``) a client's request
gets, from inside the gateway: its reply is captured instead of sent, and its ticket has
``BATCH_PRIORITY``, a queue class after every interactive one, so a slot that frees goes to an
interactive request first. What went wrong is sorted for the runner (``Outcome``): a reply (any
status) is the line's result; a refusal before any upstream answered (the key's RPM/TPM, a full
queue, Redis away) means "wait and try again", never a failed line. With tracing on, each line is
the root of a trace of its own, never linked to a client's request.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.types import Message

from genmesh.protocol import OpenAIError
from genmesh.protocol.server.logs import request_id_var
from genmesh.protocol.server.tracing import root_span, set_status

from ..admission.auth import ApiKey
from ..admission.tickets import BATCH_PRIORITY
from ..exchange.exchange import Exchange
from ..exchange.metering import ChargeOnce
from ..exchange.responses import PATH as RESPONSES_PATH
from ..exchange.responses import ResponsesExchange
from ..state import GatewayState

# refusals that say "not now" (the key's limits, the queue, Redis, no upstream yet): the line waits
WAIT_STATUSES = frozenset({429, 503})


@dataclass
class Outcome:
    status: int
    body: bytes
    retry_after_s: float = 0.0
    refused: bool = False  # the gateway refused it before an upstream answered
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def wait(self) -> bool:
        """Try again later without counting an attempt (limits, queue, Redis, upstream busy)."""
        return self.status in WAIT_STATUSES

    @property
    def transient(self) -> bool:
        """An upstream failure worth another attempt."""
        return self.status >= 500 and not self.wait


class _Capture:
    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self.headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            self.chunks.append(message.get("body", b""))


async def send_line(
    st: GatewayState,
    path: str,
    key: ApiKey,
    body: tuple[bytes, dict[str, Any]],
    request_id: str,
    lease: str | None = None,
    charge_once: ChargeOnce | None = None,
) -> Outcome:
    """Serve one line's ``body`` (its bytes and the parsed object: checked and parsed once, never
    again here) on ``path`` as key ``key``; the reply or the refusal. ``lease``: the
    line's batch slot lease id, its id in admission too (what preemption names); ``charge_once``:
    where its batch records that the line was charged (metered as an interactive request, once)."""
    capture = _Capture()
    never = asyncio.Event()

    async def receive() -> Message:  # an internal caller never goes away
        await never.wait()
        return {"type": "http.disconnect"}

    exchange = (ResponsesExchange if path == RESPONSES_PATH else Exchange)(st, path, receive, capture.send, request_id)
    token = request_id_var.set(request_id)
    try:
        # a trace of its own per line (its root, never linked to a client's request); the upstream call's
        # traceparent carries it to the microservice and the engine
        with root_span(f"batch line {path}", {"http.route": path, "genmesh.batch.line": True}) as span:
            exchange.trace(span)
            try:
                await exchange.call(key, BATCH_PRIORITY, body[0], lease, charge_once, body[1])
            except OpenAIError as err:
                set_status(span, err.status)
                retry = float(err.headers.get("Retry-After", "0") or 0)
                return Outcome(err.status, orjson.dumps(err.body()), retry, refused=True)
            finally:
                exchange.end_trace()
    finally:
        request_id_var.reset(token)
    retry = (
        float(capture.headers.get("retry-after", "0") or 0) if capture.headers.get("retry-after", "").isdigit() else 0.0
    )
    return Outcome(capture.status, b"".join(capture.chunks), retry, headers=capture.headers)
