"""``POST /v1/responses`` on the hot path: queued, admitted, limited, authenticated and metered
exactly like chat (``exchange.Exchange``), plus the stored conversation.

Before the request goes upstream: ``previous_response_id`` is looked up in Redis (404 when it is
missing, expired or another key's), its conversation goes in front of the new input, and the
engine gets the whole conversation (engines are stateless). On the way back: the response object
(the unary body, or the ``response.*`` lifecycle events of a stream) is given the
``previous_response_id`` and ``store`` it was made with, and a completed or incomplete response is
stored (unless ``store`` is false) before the client can see its end, so a follow-up sent to any
replica the moment it arrives finds it. A failed request stores nothing.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from genmesh.protocol import OpenAIError, invalid_request, now
from genmesh.protocol.response_objects import ResponseObject
from genmesh.protocol.sse import response_failed
from genmesh.relay import split_events

from ..admission.auth import ApiKey
from ..redis.client import RedisUnavailable
from ..storage.responses import input_items, too_large
from .errors import store_unavailable
from .exchange import Exchange

log = logging.getLogger("genmesh.gateway.http")

PATH = "/v1/responses"
_LIFECYCLE = re.compile(rb'"type":"(response\.(?:created|in_progress|completed|incomplete|failed))"')
_SEQUENCE = re.compile(rb'"sequence_number":(\d+)')
_RELAY_ERROR = b'data: {"error":'  # the relay's own failure event (timeout, upstream cut): chat-style


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # integers beyond 64 bits
        return json.dumps(value, separators=(",", ":")).encode()


class ResponsesExchange(Exchange):
    owner = ""
    previous_id: str | None = None
    conversation: list[Any] | None = None  # what went upstream as input; None: the upstream names the error
    store = True
    stored = False
    response_id = "resp_unknown"
    sequence = -1

    async def prepare(self, key: ApiKey, raw: bytes, body: dict[str, Any], stream: bool) -> tuple[bytes, bool]:
        self.owner = key.key_id
        self.store = body.get("store") is not False
        previous = body.get("previous_response_id")
        value = body.get("input")
        if previous is not None and not isinstance(previous, str):
            raise invalid_request("'previous_response_id' must be a string", param="previous_response_id")
        if not isinstance(value, (str, list)):
            return raw, False  # the upstream refuses it, naming 'input'; nothing is stored
        history: list[Any] = []
        if previous is not None:
            record = await self.st.responses.load(previous, self.owner, param="previous_response_id")
            history = record.conversation()
        self.previous_id = previous
        self.conversation = history + input_items(value)
        sent = {k: v for k, v in body.items() if k != "previous_response_id"}
        sent["input"] = self.conversation
        send_body = _dumps(sent)
        if (self.store or previous is not None) and len(send_body) > self.st.responses.max_bytes:
            raise too_large(self.st.responses.max_bytes, "input")
        if self.store:  # refused before it runs, not after: the key holds its quota of stored responses
            try:
                full = await self.st.quotas.responses_full(self.owner)
            except RedisUnavailable as exc:
                raise store_unavailable(self.st, exc, "response store") from exc
            if full is not None:
                raise full
        return send_body, False

    def prompt_source(self, body: dict[str, Any]) -> dict[str, Any]:
        return body if self.conversation is None else {"input": self.conversation}

    def wrap(self, relay: AsyncGenerator[bytes, None], key: ApiKey, status: int) -> AsyncGenerator[bytes, None]:
        if status != 200 or self.conversation is None:
            return relay
        return self._rewrite(relay)

    async def _rewrite(self, relay: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
        parts: list[bytes] = []
        async for chunk in relay:
            parts.append(chunk)
            if len(parts) == 1 and not chunk.lstrip().startswith(b"{"):
                break  # a stream: whole SSE events in each chunk from here
        else:  # a unary reply, rewritten once whole
            if parts:
                yield await self._unary(b"".join(parts))
            return
        yield await self._events(parts[0])
        async for chunk in relay:
            yield await self._events(chunk)

    async def _events(self, chunk: bytes) -> bytes:
        """A relayed chunk (one or more whole events) with each event rewritten (``_event``)."""
        events = split_events(chunk)
        if len(events) == 1:
            return await self._event(chunk)
        return b"".join([await self._event(event) for event in events])

    async def _unary(self, body: bytes) -> bytes:
        try:
            response = json.loads(body)
        except ValueError:
            return body
        if not isinstance(response, dict) or response.get("object") != "response":
            return body
        await self._keep(response)
        return _dumps(response)

    async def _event(self, chunk: bytes) -> bytes:
        at = chunk.rfind(b'"sequence_number":')
        if at != -1 and (seq := _SEQUENCE.match(chunk, at)) is not None:
            self.sequence = max(self.sequence, int(seq.group(1)))
        if chunk.startswith(_RELAY_ERROR):
            return self._failed(chunk)
        kind = _LIFECYCLE.search(chunk)
        if kind is None:
            return chunk
        head, sep, data = chunk.partition(b"data:")
        try:
            event = json.loads(data)
        except ValueError:
            return chunk
        response = event.get("response") if isinstance(event, dict) else None
        if not isinstance(response, dict):
            return chunk
        self.response_id = str(response.get("id") or self.response_id)
        if kind.group(1) in (b"response.completed", b"response.incomplete"):
            await self._keep(response)
        else:
            self._label(response, stored=self.store and kind.group(1) != b"response.failed")
        return head + sep + b" " + _dumps(event) + b"\n\n"

    def _label(self, response: dict[str, Any], stored: bool) -> None:
        response["previous_response_id"] = self.previous_id
        response["store"] = stored

    async def _keep(self, response: dict[str, Any]) -> None:
        """Store a completed or incomplete response (before its end goes out); label it either way."""
        storable = self.store and response.get("status") in ("completed", "incomplete") and "id" in response
        self._label(response, stored=storable)
        if not storable:
            return
        assert self.conversation is not None
        record = self.st.responses.encode(response, self.conversation)
        if record is None:
            log.warning("response %s not stored: over %d bytes", response["id"], self.st.responses.max_bytes)
            response["store"] = False
            return
        try:
            await self.st.responses.save(str(response["id"]), self.owner, record)
        except OpenAIError as err:
            log.warning("response %s not stored: %s", response["id"], err.message)
            response["store"] = False

    def _failed(self, chunk: bytes) -> bytes:
        """The relay's chat-style failure event, as the Responses API says it: ``error``, then
        ``response.failed``."""
        try:
            detail = json.loads(chunk.split(b"\n", 1)[0][len(b"data:") :])["error"]
        except (ValueError, KeyError, TypeError):
            detail = {"message": "the upstream stream failed", "code": "bad_gateway"}
        message = str(detail.get("message") or "the upstream stream failed")
        code = detail.get("code")
        err = OpenAIError(message, status=502, type="upstream_error", code=code if isinstance(code, str) else None)
        response = ResponseObject(
            id=self.response_id, created_at=now(), status="failed", model="", previous_response_id=self.previous_id
        )
        return response_failed(self.sequence + 1, response, err)
