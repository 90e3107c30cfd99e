"""``POST /v1/audio/speech`` (and ``/v3/audio/speech``), as OpenAI defines it: ``input`` spoken by the
served voice (OpenAI's voice names each map to it, as do no voice and OPEA's ``default``) as
``response_format``. WAV and PCM are streamed a chunk at a time as each is synthesised (``stream_format:
"audio"``; a WAV stream's header says "length unknown", as OpenAI's does); FLAC, MP3, Opus and AAC are
sent whole. The request is one session on the voice's bounded worker (``audio/worker.py``): its phonemes
come from one espeak-ng run, and each chunk of at most ``speech_chunk_phonemes`` is one job, taken in turn
with other requests' chunks, so long inputs take turns with short ones and a request that is dropped or
times out stops within one chunk.

A streamed reply the gateway names (``x-genmesh-speech-id``) is entered in the engine's ``SentLedger``:
each chunk's phonemes are counted as its audio is handed to the connection, and ``/v1/audio/speech/sent``
answers the characters sent (the input's share of the phonemes sent), once the reply has ended: what the
gateway charges for a reply cut short (the header ``x-genmesh-speech-characters`` says the whole input)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

from genmesh.protocol import OpenAIError, invalid_request
from genmesh.protocol.audio import SPEECH_ID_HEADER, SPEECH_MEDIA_TYPES, SpeechRequest, SpeechSent, SpeechSentQuery
from genmesh.protocol.server.asgi import CheckedRoute, unless_disconnected
from genmesh.protocol.server.streaming import EventStream

from ...audio.encode import ENCODED, encode, pcm16, wav_header
from ...audio.phonemes import PhonemesError
from ...audio.sent import Sent
from ...audio.voice import PiperVoice
from ...audio.worker import AudioWorker, Session
from .responding import add_api_route
from .transcriptions import audio_models

router = APIRouter(route_class=CheckedRoute)
STREAMED = ("wav", "pcm")
CHARACTERS_HEADER = "x-genmesh-speech-characters"
# No voice, or this name (OPEA's AudioSpeechRequest default), is the served voice.
DEFAULT_VOICE = "default"
SENT_WAIT_S = 5.0  # how long /v1/audio/speech/sent waits for a reply to end (a chunk's inference at most)


class AudioStream(EventStream):
    """Audio bytes as they are made: each chunk one write, the session closed when the reply ends, however
    it ends (the client leaving stops the synthesis)."""

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        session: Session,
        media_type: str,
        headers: dict[str, str],
        sent: Sent | None = None,
    ) -> None:
        self.media_type = media_type
        self.session = session
        self.sent = sent
        super().__init__(chunks, headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.session.close()
            if self.sent is not None:
                self.sent.end()


def saying(voice: PiperVoice, phonemes: str, speed: float) -> Callable[[threading.Event], np.ndarray]:
    def job(stop: threading.Event) -> np.ndarray:
        return voice.speak(phonemes, speed)

    return job


async def chunked(voice: PiperVoice, text: str, speed: float, chunk_phonemes: int) -> list[str]:
    """``text``'s chunks (one espeak-ng run); 400 naming ``input`` when espeak-ng's output cannot be
    matched to the text."""
    try:
        return await voice.chunks(text, speed, chunk_phonemes)
    except PhonemesError as exc:
        raise invalid_request(f"'input' could not be turned into phonemes: {exc}", param="input") from None


async def samples(voice: PiperVoice, session: Session, chunks: list[str], speed: float) -> AsyncIterator[np.ndarray]:
    """Each chunk's samples as its inference ends (the next one already queued in the session's lane)."""
    async for part in session.map(saying(voice, c, speed) for c in chunks):
        yield part


async def _streamed(
    voice: PiperVoice, session: Session, chunks: list[str], speed: float, fmt: str, sent: Sent | None
) -> AsyncIterator[bytes]:
    if fmt == "wav":
        yield wav_header(voice.rate)
    i = 0
    async for part in samples(voice, session, chunks, speed):
        if sent is not None:
            sent.send(len(chunks[i]))  # handed to the connection now: charged if the client leaves mid-way
        i += 1
        yield pcm16(part)


async def whole_audio(voice: PiperVoice, session: Session, chunks: list[str], speed: float, fmt: str) -> bytes:
    """Every chunk's samples, with a tenth of a second between chunks, encoded as ``fmt``."""
    pause = np.zeros(voice.rate // 10, dtype=np.float32)
    parts = [p async for part in samples(voice, session, chunks, speed) for p in (part, pause)]
    audio = np.concatenate(parts or [np.zeros(0, dtype=np.float32)])
    return await asyncio.to_thread(encode, audio, voice.rate, fmt)


async def spoken_whole(
    voice: PiperVoice, worker: AudioWorker, text: str, speed: float, fmt: str, chunk_phonemes: int
) -> bytes:
    """``text`` spoken whole as one request on ``worker`` (a spoken chat's answer)."""
    async with worker.session() as session:
        chunks = await chunked(voice, text, speed, chunk_phonemes)
        return await whole_audio(voice, session, chunks, speed, fmt)


async def speech(body: SpeechRequest, request: Request) -> Response:
    audio = audio_models(request)
    limit = audio.settings.speech_max_input_chars
    if len(body.input) > limit:
        raise invalid_request(
            f"'input' is longer than {limit} characters", param="input", code="string_above_max_length"
        )
    _, voice, worker = audio.speaker(body.model)
    if body.voice_name() not in ("", DEFAULT_VOICE, *audio.voices()):
        raise invalid_request(
            f"voice '{body.voice_name()}' is not served; use one of: {', '.join(audio.voices())} "
            f"(or none, or '{DEFAULT_VOICE}': the served voice)",
            param="voice",
            code="invalid_value",
        )
    fmt = body.response_format
    if fmt not in STREAMED and fmt not in ENCODED:
        raise OpenAIError(
            f"response_format '{fmt}' is not supported by this server; use one of: pcm, {', '.join(ENCODED)}",
            param="response_format",
            code="invalid_value",
        )
    if body.stream_format != "audio":
        raise OpenAIError(
            "stream_format 'sse' is not supported by this server; use 'audio'",
            param="stream_format",
            code="invalid_value",
        )
    if not body.input.strip():
        raise invalid_request("'input' holds nothing to say", param="input")
    headers = {CHARACTERS_HEADER: str(len(body.input))}
    session = worker.open()
    try:
        chunks = await unless_disconnected(
            request, chunked(voice, body.input, body.speed, audio.settings.speech_chunk_phonemes)
        )
        if not chunks:
            raise invalid_request("'input' holds nothing to say", param="input")
        if fmt in STREAMED:
            speech_id = request.headers.get(SPEECH_ID_HEADER)
            sent = None
            if speech_id:
                sent = audio.sent.enter(speech_id[:128], len(body.input), sum(len(c) for c in chunks))
            stream = _streamed(voice, session, chunks, body.speed, fmt, sent)
            return AudioStream(stream, session, SPEECH_MEDIA_TYPES[fmt], headers, sent)
        data = await unless_disconnected(request, whole_audio(voice, session, chunks, body.speed, fmt))
    except BaseException:
        session.close()
        raise
    session.close()
    return Response(data, media_type=SPEECH_MEDIA_TYPES[fmt], headers=headers)


async def speech_sent(body: SpeechSentQuery, request: Request) -> SpeechSent:
    """The characters a streamed speech reply sent (``SentLedger``), once it has ended or after
    ``SENT_WAIT_S``; 404 for an id not entered (not streamed, or long ended)."""
    entry = await audio_models(request).sent.wait(body.speech_id, SENT_WAIT_S)
    if entry is None:
        message = f"no streamed speech reply '{body.speech_id[:100]}'"
        raise OpenAIError(message, status=404, type="not_found_error", param="speech_id", code="not_found")
    return SpeechSent(speech_id=body.speech_id, characters=entry.characters_sent(), ended=entry.ended.is_set())


add_api_route(router, "audio/speech", speech)
add_api_route(router, "audio/speech/sent", speech_sent)
