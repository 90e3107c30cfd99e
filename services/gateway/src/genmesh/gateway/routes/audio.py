"""``POST /v1/audio/transcriptions`` and ``/v1/audio/speech`` through the gateway: authenticated,
limited per key, queued for a slot of the model's own (a route of ``kind`` transcription or speech)
and relayed as the upstream answers (the multipart upload byte for byte; JSON, text, an SSE
transcript or audio back chunk by chunk). Metered per key as OpenAI bills them: the seconds of audio
transcribed and the characters spoken (the engine says each in ``x-genmesh-audio-seconds`` and
``x-genmesh-speech-characters``), in the key's usage and in the tenant's counters."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from genmesh.protocol import OpenAIError, internal_error, invalid_request, model_not_found
from genmesh.protocol.server.http_server import too_large
from genmesh.protocol.server.inputs import decode_json_object
from genmesh.protocol.server.logs import request_id_var
from genmesh.protocol.server.tracing import server_span
from genmesh.relay import Outcome, UpstreamResponse

from ..audio_usage import meter_audio
from ..auth import ApiKey, resolve_priority
from ..config import ModelRoute
from ..exchange.errors import ClientGone, admission_error, authenticate
from ..exchange.exchange import Exchange
from ..state import GatewayState
from ..store import StoreUnavailable
from ..tickets import Ticket

log = logging.getLogger("genmesh.gateway.audio")
TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
SPEECH_PATH = "/v1/audio/speech"
KINDS = {TRANSCRIPTIONS_PATH: "transcription", SPEECH_PATH: "speech"}
PATHS = frozenset(KINDS)
MAX_FIELDS = 16
MAX_FIELD_BYTES = 64 * 1024


def audio_route(st: GatewayState, model: object, kind: str) -> ModelRoute:
    route = st.config.route(model) if isinstance(model, str) else None
    if route is None:  # OpenAI's names (whisper-1, tts-1, ...) or none: the one model of the kind
        of_kind = [r for r in st.config.models.values() if r.kind == kind]
        if len(of_kind) == 1:
            return of_kind[0]
        raise model_not_found(str(model))
    if route.kind != kind:
        raise invalid_request(
            f"model '{route.name}' is a {route.kind} model, not a {kind} model",
            param="model",
            code="model_not_supported",
        )
    return route


async def form_fields(raw: bytes, content_type: str, limit: int) -> dict[str, Any]:
    """The text fields of a multipart body (the file is left to the engine); 400 naming ``file`` when
    malformed or missing, 413 naming it when it is over ``limit`` bytes."""
    if not content_type.startswith("multipart/form-data"):
        raise invalid_request("send the audio as multipart/form-data with a 'file' field", param="file")
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    scope = {"type": "http", "method": "POST", "headers": [(b"content-type", content_type.encode("latin-1"))]}
    try:
        form = await Request(scope, receive).form(max_files=1, max_fields=MAX_FIELDS, max_part_size=MAX_FIELD_BYTES)
    except MultiPartException as exc:
        raise invalid_request(f"malformed multipart body: {exc.message}", param="file") from exc
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise invalid_request("missing required parameter: 'file' (an audio file)", param="file")
        if upload.size is not None and upload.size > limit:
            raise OpenAIError(
                f"the audio file is larger than this server's limit of {limit} bytes",
                status=413,
                param="file",
                code="file_too_large",
            )
        return {k: v for k, v in form.multi_items() if isinstance(v, str)}
    finally:
        await form.close()


class AudioExchange(Exchange):
    """One audio request: ``Exchange``'s way (limits, queue, slot, relay, release) with its own body
    (multipart or speech JSON), its own size limit and its own metering."""

    def __init__(self, st: GatewayState, path: str, receive: Receive, send: Send, rid: str, content_type: str) -> None:
        super().__init__(st, path, receive, send, rid)
        self.content_type = content_type
        if path == TRANSCRIPTIONS_PATH:  # the upload goes on with its own content type (its boundary)
            self.own_headers = [*self.own_headers, (b"content-type", content_type.encode("latin-1"))]

    def trace(self, span: Any) -> None:
        super().trace(span)
        if span is not None and self.path == TRANSCRIPTIONS_PATH:  # trace() set the headers anew
            self.own_headers = [*self.own_headers, (b"content-type", self.content_type.encode("latin-1"))]

    async def run(self, authorization: str | None, priority_header: str | None) -> None:
        st = self.st
        route_name = "-"
        try:
            budget_s = st.settings.redis_timeout_s
            began = time.monotonic()
            try:
                key = await st.admission.store.within(began + budget_s, authenticate(st, authorization))
            except StoreUnavailable as exc:
                raise admission_error(exc, 1) from exc
            budget_s -= time.monotonic() - began
            raw = await self._read_audio_body()
            if self.path == TRANSCRIPTIONS_PATH:
                body = await form_fields(raw, self.content_type, st.settings.audio_max_bytes)
            else:
                body = decode_json_object(raw, st.settings.max_json_depth, st.settings.max_json_containers)
            route = audio_route(st, body.get("model"), KINDS[self.path])
            route_name = route.name
            priority = resolve_priority(key, priority_header, st.settings.default_priority)
            # stream=False: the reply is relayed chunk by chunk as it comes, untouched (no SSE rewriting)
            await self._serve(key, route, priority, raw, body, False, time.monotonic() + budget_s)
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

    async def _read_audio_body(self) -> bytes:
        limit = self.st.settings.audio_max_bytes + 64 * 1024 if self.path == TRANSCRIPTIONS_PATH else None
        limit = limit or self.st.settings.max_body_bytes
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    async def prepare(self, key: ApiKey, raw: bytes, body: dict[str, Any], stream: bool) -> tuple[bytes, bool]:
        return raw, False

    async def _finish(
        self, key: ApiKey, ticket: Ticket, resp: UpstreamResponse, out: Outcome, upstream: str, *, completed: bool
    ) -> None:
        await super()._finish(key, ticket, resp, out, upstream, completed=completed)
        if completed and resp.status == 200:
            await self._meter(key, resp)

    async def _meter(self, key: ApiKey, resp: UpstreamResponse) -> None:
        """The audio seconds (transcription) or characters (speech) of a served reply, counted per key."""
        if self.path == TRANSCRIPTIONS_PATH:
            raw = resp.header(b"x-genmesh-audio-seconds")
            await meter_audio(self.st, key, float(raw) if raw else 0.0, 0)
        else:
            raw = resp.header(b"x-genmesh-speech-characters")
            await meter_audio(self.st, key, 0.0, int(raw) if raw else 0)


async def serve(st: GatewayState, scope: Scope, receive: Receive, send: Send) -> None:
    """Serve one audio request (``scope["path"]`` is one of ``PATHS``)."""
    authorization = priority_header = rid = None
    content_type = ""
    for k, v in scope["headers"]:
        if k == b"authorization":
            authorization = v.decode("latin-1")
        elif k == b"x-priority":
            priority_header = v.decode("latin-1")
        elif k == b"x-request-id":
            rid = v.decode("latin-1")[:128]
        elif k == b"content-type":
            content_type = v.decode("latin-1")
    rid = rid or uuid.uuid4().hex
    token = request_id_var.set(rid)
    try:
        ex = AudioExchange(st, scope["path"], receive, send, rid, content_type)
        if scope["method"] != "POST":
            await ex.send_error(OpenAIError("Method Not Allowed", status=405, type="invalid_request_error"))
            return
        with server_span("POST", scope["path"], scope["headers"]) as root:
            ex.trace(root)
            try:
                await ex.run(authorization, priority_header)
            finally:
                ex.end_trace()
    finally:
        request_id_var.reset(token)
