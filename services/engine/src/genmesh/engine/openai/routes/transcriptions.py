"""``POST /v1/audio/transcriptions`` (and OVMS's ``/v3/audio/transcriptions``), as OpenAI defines it:
a multipart form with ``file`` and the fields of ``TranscriptionRequest``; the reply as
``response_format`` asks (json, text, srt, vtt, verbose_json), or, with ``stream``, SSE events
``transcript.text.delta`` and one ``transcript.text.done``. Each reply says the audio's length in
``x-genmesh-audio-seconds`` (the gateway meters it; JSON and the done event carry it as ``usage``)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import OpenAIError, file_too_large, internal_error, invalid_request, unsupported_parameter
from genmesh.protocol.audio import (
    Transcription,
    TranscriptionRequest,
    TranscriptionSegment,
    TranscriptionUsage,
    TranscriptionVerbose,
    TranscriptionWord,
    TranscriptTextDelta,
    TranscriptTextDone,
    srt,
    vtt,
)
from genmesh.protocol.server.asgi import unless_disconnected
from genmesh.protocol.server.audio_form import audio_form
from genmesh.protocol.server.streaming import EventStream
from genmesh.protocol.sse import error_event, event

from ...audio.decode import WHISPER_RATE, decode
from ...audio.whisper import Ask, Transcript, WhisperModel
from ...audio.worker import AudioWorker
from ..audio_models import AudioModels
from .responding import SSE_HEADERS, add_api_route, registry

log = logging.getLogger("genmesh.engine.audio")
router = APIRouter()  # a multipart body: not CheckedRoute, which decodes JSON
SECONDS_HEADER = "x-genmesh-audio-seconds"


def audio_models(request: Request) -> AudioModels:
    audio: AudioModels = registry(request).audio
    return audio


async def read_form(request: Request, limit: int) -> tuple[bytes, TranscriptionRequest]:
    """The uploaded file's bytes and the other fields; 400 naming the field, 413 past ``limit``."""
    async with audio_form(request) as (upload, fields):
        body = TranscriptionRequest.from_form(fields)
        data = await upload.read(limit + 1)
        if len(data) > limit:
            raise file_too_large(limit, "audio file")
    return data, body


def _ask(body: TranscriptionRequest) -> Ask:
    timed = body.response_format in ("verbose_json", "srt", "vtt")
    return Ask(
        language=body.language,
        prompt=body.prompt,
        temperature=body.temperature,
        segments=timed or "segment" in body.timestamp_granularities,
        words=body.response_format == "verbose_json" and "word" in body.timestamp_granularities,
    )


def _segments(t: Transcript) -> list[TranscriptionSegment]:
    return [TranscriptionSegment(id=i, start=s.start, end=s.end, text=s.text) for i, s in enumerate(t.segments)]


def formatted(t: Transcript, body: TranscriptionRequest, language: str) -> Response:
    seconds = {SECONDS_HEADER: f"{t.duration:.3f}"}
    usage = TranscriptionUsage(seconds=round(t.duration, 3))
    fmt = body.response_format
    if fmt == "text":
        return Response(t.text + "\n", media_type="text/plain", headers=seconds)
    if fmt == "srt":
        return Response(srt(_segments(t)), media_type="text/plain", headers=seconds)
    if fmt == "vtt":
        return Response(vtt(_segments(t)), media_type="text/vtt", headers=seconds)
    if fmt == "verbose_json":
        verbose = TranscriptionVerbose(
            language=language,
            duration=round(t.duration, 3),
            text=t.text,
            segments=_segments(t)
            if not body.timestamp_granularities or "segment" in body.timestamp_granularities
            else None,
            words=[TranscriptionWord(word=w.text.strip(), start=w.start, end=w.end) for w in t.words]
            if "word" in body.timestamp_granularities
            else None,
            usage=usage,
        )
        return Response(verbose.model_dump_json(exclude_none=True), media_type="application/json", headers=seconds)
    plain = Transcription(text=t.text, usage=usage)
    return Response(plain.model_dump_json(exclude_none=True), media_type="application/json", headers=seconds)


async def streamed(model: WhisperModel, worker: AudioWorker, samples: np.ndarray, ask: Ask) -> AsyncIterator[bytes]:
    """The text as it is decoded. The queue holds at most one window's tokens (Whisper stops at 448)."""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue[str] = asyncio.Queue()

    def job(stop: threading.Event) -> Transcript:
        def push(text: str) -> None:
            loop.call_soon_threadsafe(pieces.put_nowait, text)

        return model.transcribe(samples, ask, stop, push)

    run = asyncio.ensure_future(worker.run(job))
    try:
        while not run.done() or not pieces.empty():
            getter = asyncio.ensure_future(pieces.get())
            await asyncio.wait({getter, run}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                if piece := getter.result():
                    yield event(TranscriptTextDelta(delta=piece).model_dump_json())
            else:
                getter.cancel()
        t = run.result()
        done = TranscriptTextDone(text=t.text, usage=TranscriptionUsage(seconds=round(t.duration, 3)))
        yield event(done.model_dump_json())
    except OpenAIError as err:
        yield error_event(err)
    except Exception as exc:
        log.exception("transcription stream failed")
        yield error_event(internal_error(f"transcription failed: {type(exc).__name__}"))
    finally:
        run.cancel()


async def transcriptions(request: Request) -> Response:
    audio = audio_models(request)
    settings = audio.settings
    data, body = await read_form(request, settings.audio_max_bytes)
    if body.timestamp_granularities and body.response_format != "verbose_json":
        raise invalid_request(
            "timestamp_granularities needs response_format 'verbose_json'", param="timestamp_granularities"
        )
    if body.include:
        raise unsupported_parameter("include", "no logprobs for transcriptions")
    if body.stream and body.response_format not in ("json", "text"):
        raise invalid_request("stream needs response_format 'json' or 'text'", param="stream")
    _, model, worker = audio.transcriber(body.model)
    if not model.multilingual and body.language not in (None, "en"):
        raise invalid_request(f"this model transcribes English only, not '{body.language}'", param="language")
    limits = audio.limits
    ask = _ask(body)
    if body.stream:  # decoded first (the reply's header says the seconds), on the worker, then streamed
        samples = await unless_disconnected(request, worker.run(lambda stop: decode(data, limits, stop)))
        seconds = f"{samples.shape[0] / WHISPER_RATE:.3f}"
        return EventStream(streamed(model, worker, samples, ask), {**SSE_HEADERS, SECONDS_HEADER: seconds})

    def job(stop: threading.Event) -> Transcript:  # decoding too runs on the worker, within its deadline
        return model.transcribe(decode(data, limits, stop), ask, stop)

    transcript = await unless_disconnected(request, worker.run(job))
    return formatted(transcript, body, body.language or "english")


add_api_route(router, "audio/transcriptions", transcriptions)
