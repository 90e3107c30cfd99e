"""``POST /v1/audio/speech`` (and ``/v3/audio/speech``), as OpenAI defines it: ``input`` spoken by the
served voice (OpenAI's voice names each map to it, as do no voice and OPEA's ``default``) as
``response_format``. WAV and PCM are streamed a sentence at a time as each is synthesised
(``stream_format: "audio"``; a WAV stream's header says "length unknown", as OpenAI's does); FLAC,
MP3, Opus and AAC are sent whole. Each sentence is one job on
the voice's bounded worker, so long inputs take turns with short ones."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import OpenAIError, invalid_request
from genmesh.protocol.audio import SPEECH_MEDIA_TYPES, SpeechRequest
from genmesh.protocol.server.asgi import CheckedRoute, unless_disconnected
from genmesh.protocol.server.streaming import EventStream

from ...audio.encode import ENCODED, encode, pcm16, wav_header
from ...audio.voice import PiperVoice, sentences
from ...audio.worker import AudioWorker
from .responding import add_api_route
from .transcriptions import audio_models

router = APIRouter(route_class=CheckedRoute)
STREAMED = ("wav", "pcm")
CHARACTERS_HEADER = "x-genmesh-speech-characters"
# No voice, or this name (OPEA's AudioSpeechRequest default), is the served voice.
DEFAULT_VOICE = "default"


class AudioStream(EventStream):
    """Audio bytes as they are made: each chunk one write, the synthesis stopped if the client leaves."""

    def __init__(self, chunks: AsyncIterator[bytes], media_type: str, headers: dict[str, str]) -> None:
        self.media_type = media_type
        super().__init__(chunks, headers)


def saying(voice: PiperVoice, sentence: str, speed: float) -> Callable[[threading.Event], np.ndarray]:
    def job(stop: threading.Event) -> np.ndarray:
        return voice.synthesise(sentence, speed)

    return job


async def _spoken(
    voice: PiperVoice, worker: AudioWorker, parts: list[str], speed: float, fmt: str
) -> AsyncIterator[bytes]:
    if fmt == "wav":
        yield wav_header(voice.rate)
    for sentence in parts:
        yield pcm16(await worker.run(saying(voice, sentence, speed)))


async def whole_audio(voice: PiperVoice, worker: AudioWorker, parts: list[str], speed: float, fmt: str) -> bytes:
    chunks = [await worker.run(saying(voice, sentence, speed)) for sentence in parts]
    pause = np.zeros(voice.rate // 10, dtype=np.float32)
    samples = np.concatenate([c for chunk in chunks for c in (chunk, pause)] or [np.zeros(0, dtype=np.float32)])
    return await asyncio.to_thread(encode, samples, voice.rate, fmt)


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
    parts = sentences(body.input)
    if not parts:
        raise invalid_request("'input' holds nothing to say", param="input")
    headers = {CHARACTERS_HEADER: str(len(body.input))}
    if fmt in STREAMED:
        return AudioStream(_spoken(voice, worker, parts, body.speed, fmt), SPEECH_MEDIA_TYPES[fmt], headers)
    data = await unless_disconnected(request, whole_audio(voice, worker, parts, body.speed, fmt))
    return Response(data, media_type=SPEECH_MEDIA_TYPES[fmt], headers=headers)


add_api_route(router, "audio/speech", speech)
