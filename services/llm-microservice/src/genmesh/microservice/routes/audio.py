"""``POST /v1/audio/transcriptions`` and ``/v1/audio/speech``, relayed to the engine as they come:
the transcription's multipart form byte for byte as it arrives, a piece at a time (never held whole;
its size bounded by ``--audio-max-bytes``, counted as it comes: a 413 past it), the
speech request's JSON after the wire model's check. The reply comes back as the engine sends it: a
JSON/text body whole, an SSE transcript or an audio stream chunk by chunk, with the engine's audio
metering headers (the gateway counts them). A client that leaves closes the engine request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable

import aiohttp
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from genmesh.protocol import OpenAIError, from_validation_error, invalid_request
from genmesh.protocol.audio import SPEECH_ID_HEADER, SPEECH_SENT_PATH, SpeechRequest, SpeechSentQuery
from genmesh.protocol.server.streaming import EventStream

from ..settings import TRANSCRIPTIONS_PATH
from ..upstream import Reply, close
from .responding import _error_json, deadline_error, json_body, request_id, state_of

SPEECH_PATH = "/v1/audio/speech"
# The engine's reply headers relayed as they are (the gateway meters audio seconds and characters).
AUDIO_HEADERS = ("content-type", "retry-after", "x-genmesh-audio-seconds", "x-genmesh-speech-characters")
STREAMED = ("text/event-stream", "audio/")

router = APIRouter()


class Relayed(EventStream):
    """The engine's reply body, chunk by chunk, under the engine's content type."""

    def __init__(self, chunks: AsyncIterator[bytes], headers: dict[str, str]) -> None:
        self.media_type = headers.pop("content-type", "application/octet-stream")
        super().__init__(chunks, headers)


async def _chunks(response: aiohttp.ClientResponse, deadline: float) -> AsyncIterator[bytes]:
    try:
        async with asyncio.timeout_at(deadline):
            async for chunk in response.content.iter_any():
                yield chunk
    finally:
        await close(response)


class Upload:
    """A request's body as it arrives, for the engine; the client's own fault on the way (past the body
    limit, gone) kept to be answered as such rather than as the engine's failure."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.error: Exception | None = None

    async def pieces(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self.request.stream():
                yield piece
        except Exception as exc:
            self.error = exc
            raise


async def _relay(
    request: Request,
    path: str,
    json: dict[str, object] | None,
    raw: tuple[AsyncIterable[bytes], str] | None,
    upload: Upload | None = None,
) -> Response:
    st = state_of(request)
    deadline_s = st.settings.request_timeout_s
    deadline = asyncio.get_running_loop().time() + deadline_s
    passed = {k: v for k in (SPEECH_ID_HEADER,) if (v := request.headers.get(k)) is not None}
    try:
        async with asyncio.timeout(deadline_s):
            response = await st.upstream.open("POST", path, request_id(request), json, raw=raw, extra_headers=passed)
    except TimeoutError as exc:
        raise deadline_error("total", deadline_s) from exc
    except OpenAIError:
        if upload is not None and upload.error is not None:
            raise upload.error from None  # the client's body failed (too large, gone): not the engine's fault
        raise
    headers = {k: v for k in AUDIO_HEADERS if (v := response.headers.get(k)) is not None}
    if response.status < 400 and headers.get("content-type", "").startswith(STREAMED):
        return Relayed(_chunks(response, deadline), headers)
    reply: Reply = await st.upstream.read(response)
    if reply.status >= 400:
        return _error_json(reply)
    return Response(reply.body, status_code=reply.status, headers=headers)


async def transcriptions(request: Request) -> Response:
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise invalid_request("send the audio as multipart/form-data with a 'file' field", param="file")
    upload = Upload(request)
    return await _relay(request, TRANSCRIPTIONS_PATH, None, (upload.pieces(), content_type), upload)


def checked_relay(path: str, model: type[BaseModel]) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint that relays its JSON body to the engine's ``path`` once ``model`` accepts it."""

    async def endpoint(request: Request) -> Response:
        body = await json_body(request)
        try:
            model.model_validate(body)
        except ValidationError as exc:
            raise from_validation_error(exc) from None
        return await _relay(request, path, body, None)

    return endpoint


speech = checked_relay(SPEECH_PATH, SpeechRequest)
# genmesh's own: what a streamed speech reply sent, for the gateway's metering, asked of the engine
speech_sent = checked_relay(SPEECH_SENT_PATH, SpeechSentQuery)


router.add_api_route(SPEECH_SENT_PATH, speech_sent, methods=["POST"], response_model=None, include_in_schema=False)
router.add_api_route(
    TRANSCRIPTIONS_PATH, transcriptions, methods=["POST"], response_model=None, include_in_schema=False
)
router.add_api_route(SPEECH_PATH, speech, methods=["POST"], response_model=None, include_in_schema=False)
