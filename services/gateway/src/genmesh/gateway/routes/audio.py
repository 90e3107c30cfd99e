"""``POST /v1/audio/transcriptions`` and ``/v1/audio/speech`` through the gateway: authenticated,
limited per key, queued for a slot of the model's own (a route of ``kind`` transcription or speech)
and relayed (the multipart upload byte for byte as it arrives, holding one piece: ``exchange/upload.py``;
JSON, text, an SSE transcript or audio back chunk by chunk as the upstream answers). Metered per key as
OpenAI bills them: the seconds of audio transcribed and the characters spoken (the engine says each in
``x-genmesh-audio-seconds`` and ``x-genmesh-speech-characters``; a streamed speech reply cut short: the
characters it sent, asked of the engine), in the key's usage and in the tenant's counters."""

from __future__ import annotations

import contextlib
import functools
import logging
import uuid
from typing import Any

from starlette.types import Receive, Scope, Send

from genmesh.protocol import invalid_request, model_not_found
from genmesh.protocol.audio import SPEECH_ID_HEADER
from genmesh.protocol.server.inputs import decode_json_object
from genmesh.relay import Outcome, UpstreamResponse

from ..admission.auth import ApiKey
from ..admission.tickets import Ticket
from ..exchange.audio import characters_sent, meter_audio
from ..exchange.dispatch import StreamedBody, take_slot
from ..exchange.exchange import Exchange
from ..exchange.upload import Upload
from ..routing.config import ModelRoute
from ..state import GatewayState
from . import completions

log = logging.getLogger("genmesh.gateway.audio")
TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
SPEECH_PATH = "/v1/audio/speech"
KINDS = {TRANSCRIPTIONS_PATH: "transcription", SPEECH_PATH: "speech"}
PATHS = frozenset(KINDS)


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


class AudioExchange(Exchange):
    """One audio request: ``Exchange``'s way (limits, queue, slot, relay, release) with its own body
    (multipart or speech JSON), its own size limit and its own metering."""

    def __init__(self, st: GatewayState, path: str, receive: Receive, send: Send, rid: str, content_type: str) -> None:
        super().__init__(st, path, receive, send, rid)
        self.content_type = content_type
        self.upload: Upload | None = None  # a transcription's body, relayed as it comes
        self.spooling = contextlib.AsyncExitStack()  # a spooled upload's slot among --files-max-concurrent
        self.speech_id = uuid.uuid4().hex  # speech: the engine counts what its stream sent under this id
        if path == TRANSCRIPTIONS_PATH:
            self.max_body = st.settings.audio_max_bytes + 64 * 1024  # the audio file and the form's text fields
        self.own_headers = [*self.own_headers, *self._headers()]

    def _headers(self) -> list[tuple[bytes, bytes]]:
        """A transcription's upload goes on with its own content type (its boundary); a speech request
        with its id, for the engine's count of what it sent."""
        if self.path == TRANSCRIPTIONS_PATH:
            return [(b"content-type", self.content_type.encode("latin-1"))]
        return [(SPEECH_ID_HEADER.encode(), self.speech_id.encode())]

    def trace(self, span: Any) -> None:
        super().trace(span)
        if span is not None:  # trace() set the headers anew
            self.own_headers = [*self.own_headers, *self._headers()]

    async def before_body(self, key: ApiKey, ticket_id: str, priority: int, admit_by: float) -> None:
        """A transcription whose model the path alone names (the one transcription model) waits for its
        slot before its upload is read: a queued upload holds none of its bytes in the gateway."""
        if self.path != TRANSCRIPTIONS_PATH:
            return
        of_kind = [r for r in self.st.config.models.values() if r.kind == KINDS[self.path]]
        if len(of_kind) != 1:
            return  # the form's model field picks it: the queue comes after the form's head (receive_body)
        ticket = Ticket(id=ticket_id, route=of_kind[0], tenant=key.tenant, priority=priority, admit_by=admit_by)
        self.held = (ticket, await take_slot(self.st, ticket))

    async def run(self, authorization: str | None, priority_header: str | None) -> None:
        try:
            await super().run(authorization, priority_header)
        finally:
            if self.upload is not None:
                await self.upload.close()
            await self.spooling.aclose()

    async def receive_body(self) -> bytes:
        """A transcription's form up to its file (``Upload.head``): its text fields, the upload left to
        be relayed as it comes once a slot is taken. A form whose ``model`` comes after its file, with
        several transcription models to choose from, is spooled first (``Upload.spool``), holding one of
        the replica's ``--files-max-concurrent`` upload slots while its spool lasts (429 past them)."""
        if self.path != TRANSCRIPTIONS_PATH:
            return await super().receive_body()
        self.admitted()
        settings = self.st.settings
        self.upload = upload = Upload(self.receive, self.content_type, self.max_body, settings.audio_max_bytes)
        fields = await upload.head()
        if "model" not in fields and self.held is None and not upload.ended.is_set():
            await self.spooling.enter_async_context(self.st.quotas.slot())
            await upload.spool()  # the queue is the model's: its name must be known first
        return b""

    async def body_read(self) -> None:
        if self.upload is not None:
            await self.upload.ended.wait()

    async def parse(self, raw: bytes) -> dict[str, Any]:
        if self.upload is not None:
            return dict(self.upload.form.fields)
        return decode_json_object(raw, self.st.settings.max_json_depth, self.st.settings.max_json_containers)

    def streams(self, body: dict[str, Any]) -> bool:
        return False  # the reply is relayed chunk by chunk as it comes, untouched (no SSE rewriting)

    async def _route(self, key: ApiKey, body: dict[str, Any]) -> ModelRoute:
        return audio_route(self.st, body.get("model"), KINDS[self.path])

    def _annotate(self, body: dict[str, Any], model: str, priority: int, tenant: str, stream: bool) -> None:
        """None of the GenAI request attributes: they name chat, embeddings and rerank operations only."""

    async def prepare(
        self, key: ApiKey, raw: bytes, body: dict[str, Any], stream: bool
    ) -> tuple[bytes | StreamedBody, bool]:
        return (raw if self.upload is None else self.upload), False

    async def _finish(
        self, key: ApiKey, ticket: Ticket, resp: UpstreamResponse, out: Outcome, upstream: str, *, completed: bool
    ) -> None:
        self.request = None  # audio is charged in seconds and characters, never in tokens (any format)
        await super()._finish(key, ticket, resp, out, upstream, completed=completed)
        await self._meter(key, resp, cut=not completed or out.error is not None)

    async def _meter(self, key: ApiKey, resp: UpstreamResponse, *, cut: bool) -> None:
        """The audio seconds (transcription) or characters (speech) of a reply the upstream began, counted
        per key whether or not the client took all of it (the engine says them in the reply's head), and
        the request, once; a refusal is counted as a request only. A speech reply cut short (``cut``) is
        charged the characters it sent, as its engine counted them (``characters_sent``; the whole
        input when the engine cannot say)."""
        seconds, characters = 0.0, 0
        if resp.status == 200:
            if self.path == TRANSCRIPTIONS_PATH:
                seconds = _number(resp.header(b"x-genmesh-audio-seconds"), float)
            else:
                characters = int(_number(resp.header(b"x-genmesh-speech-characters"), int))
                if cut and (up := self.leg[1]) is not None:
                    sent = await characters_sent(self.st, up.url, self.speech_id, self.rid_header[1])
                    characters = characters if sent is None else min(sent, characters)
        await meter_audio(self.st, key, seconds, characters, request=True)


def _number(raw: bytes | None, kind: type[float] | type[int]) -> float:
    """A count from an upstream's header; 0 when absent or not a finite, non-negative number."""
    try:
        value = float(kind(raw)) if raw else 0.0
    except ValueError:
        return 0.0
    return value if 0 <= value < 1e9 else 0.0


async def serve(st: GatewayState, scope: Scope, receive: Receive, send: Send) -> None:
    """Serve one audio request (``scope["path"]`` is one of ``PATHS``) as ``completions.serve`` serves
    a completion, with an ``AudioExchange`` that knows the body's content type."""
    content_type = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"content-type"), "")
    await completions.serve(st, scope, receive, send, functools.partial(AudioExchange, content_type=content_type))
