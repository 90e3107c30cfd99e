"""A spoken chat turn on ``/v1/chat/completions`` (OpenAI's audio chat; OPEA's AudioQnA), composed here
in the engine, which holds Whisper, the voice and the chat model in one process: each ``input_audio``
part is transcribed (Whisper's worker) and its transcript takes the part's place; the chat model
answers the text-only request as any other; with ``modalities`` asking for audio, the answer is spoken
(the voice's worker) into ``message.audio`` (``content`` is then null, as OpenAI's), or, streamed, into
``delta.audio``: transcript pieces as the tokens come, each sentence's audio as soon as it is spoken.

The reply says the audio transcribed (``x-genmesh-audio-seconds``) and, unary, the characters spoken
(``x-genmesh-speech-characters``); its usage carries both (``audio_seconds``, ``speech_characters``),
which is where the gateway meters them (a stream's header goes out before anything is spoken)."""

from __future__ import annotations

import base64
import re
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import Response

from genmesh.protocol import (
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    ChatMessage,
    OpenAIError,
    TextPart,
    invalid_request,
    new_id,
    now,
)
from genmesh.protocol.chat import SpokenChatChunk, SpokenChatResponse
from genmesh.protocol.server.asgi import unless_disconnected
from genmesh.protocol.server.streaming import EventStream
from genmesh.protocol.spoken import (
    STREAMED_AUDIO_FORMATS,
    ChatAudioDelta,
    ChatCompletionAudio,
    InputAudioPart,
    SpokenUsage,
    input_audio_bytes,
)

from ...audio.decode import decode
from ...audio.encode import pcm16, wav_header
from ...audio.voice import PiperVoice
from ...audio.whisper import Ask, Transcript
from ...audio.worker import AudioWorker
from ...client.generation import Event, Generation
from ..loaded_model import EngineState
from ..prompt_logprobs import Prompts, ScoringPlan, scored_results, scored_stream
from .responding import SSE_HEADERS, ReplyWriter, grouped, guarded
from .speech import CHARACTERS_HEADER, chunked, samples, spoken_whole
from .transcriptions import SECONDS_HEADER, audio_models

# The end of a sentence in text still being generated: what precedes it can be spoken already.
_SENTENCE_END = re.compile(r"[.!?;:]\s+")
# OpenAI's chat ``format`` -> the speech encoder's (``pcm16`` is the speech endpoint's ``pcm``).
_ENCODER_FORMAT = {"pcm16": "pcm", "wav": "wav", "mp3": "mp3", "flac": "flac", "opus": "opus", "aac": "aac"}


class ChunkWriter(ReplyWriter, Protocol):
    """The chat route's writer: its whole reply and chunks, and one chunk of a delta."""

    def chunk(self, index: int, delta: ChatDelta) -> ChatCompletionChunk: ...


@dataclass
class Speaker:
    voice: PiperVoice
    worker: AudioWorker
    fmt: str  # the request's audio.format
    chunk_phonemes: int  # --speech-chunk-phonemes


@dataclass
class SpokenTurn:
    """The text-only request the chat model answers, the audio seconds transcribed for it, and who
    speaks the answer (None: ``modalities`` asks for text only)."""

    body: ChatCompletionRequest
    audio_seconds: float
    speaker: Speaker | None
    characters: int = field(default=0)

    def usage(self, tokens: Any) -> SpokenUsage:
        return SpokenUsage(
            **tokens.model_dump(), audio_seconds=round(self.audio_seconds, 3), speech_characters=self.characters
        )


def _speaker(body: ChatCompletionRequest, request: Request) -> Speaker | None:
    """Who speaks the answer, once ``modalities``, ``audio`` and ``n`` are checked (else a 400 naming them)."""
    wants = body.modalities is not None and "audio" in body.modalities
    if not wants:
        if body.audio is not None:
            raise invalid_request("'audio' is given but 'modalities' does not ask for audio", param="modalities")
        return None
    if body.audio is None:
        raise invalid_request(
            "missing required parameter: 'audio' ({'voice', 'format'}) when 'modalities' asks for audio", param="audio"
        )
    audio = audio_models(request)
    if audio.voice is None:
        raise invalid_request("this server serves no voice: 'modalities' cannot ask for audio", param="modalities")
    if (body.n or 1) > 1:
        raise invalid_request("a spoken answer has one choice: 'n' must be 1", param="n")
    fmt = body.audio.format
    if fmt not in _ENCODER_FORMAT:
        raise invalid_request(
            f"audio format '{fmt}' is not supported by this server; use one of: {', '.join(_ENCODER_FORMAT)}",
            param="audio.format",
            code="invalid_value",
        )
    if body.stream and fmt not in STREAMED_AUDIO_FORMATS:
        raise invalid_request(
            f"a streamed spoken answer is {' or '.join(STREAMED_AUDIO_FORMATS)}, not '{fmt}'",
            param="audio.format",
            code="invalid_value",
        )
    name = body.audio.voice_name()
    if name not in audio.voices():
        raise invalid_request(
            f"voice '{name}' is not served; use one of: {', '.join(audio.voices())}",
            param="audio.voice",
            code="invalid_value",
        )
    _, voice, worker = audio.speaker(None)
    return Speaker(voice, worker, fmt, audio.settings.speech_chunk_phonemes)


async def _transcribe(request: Request, part: InputAudioPart, where: str, heard_s: float) -> Transcript:
    """One ``input_audio`` part, decoded and transcribed on Whisper's worker; ``heard_s``: the seconds of
    the request's parts before it (all of them share one ``audio_max_duration_s``)."""
    audio = audio_models(request)
    if audio.whisper is None:
        raise invalid_request("this server serves no transcription model for 'input_audio'", param=where)
    settings = audio.settings
    _, model, worker = audio.transcriber(None)
    raw = input_audio_bytes(part, where, settings.audio_max_bytes)
    total = settings.audio_max_duration_s
    limits = replace(audio.limits, max_duration_s=total - heard_s)

    def job(stop: threading.Event) -> Transcript:
        return model.transcribe(decode(raw, limits, stop), Ask(), stop)

    try:
        return await unless_disconnected(request, worker.run(job))
    except OpenAIError as err:  # decode names the transcription endpoint's 'file'
        if err.param == "file":
            err.param = f"{where}.input_audio.data"
            if err.code == "audio_too_long":
                err.message = (
                    f"the request's input_audio parts are longer than this server's limit of {total:g} s "
                    f"together ({heard_s:.1f} s before this one)"
                )
        raise


async def prepare(body: ChatCompletionRequest, request: Request) -> SpokenTurn:
    """Check the spoken request, transcribe its audio parts, and make the text-only request."""
    speaker = _speaker(body, request)
    seconds = 0.0
    messages: list[ChatMessage] = []
    for i, message in enumerate(body.messages):
        if not isinstance(message.content, list) or not any(isinstance(p, InputAudioPart) for p in message.content):
            messages.append(message)
            continue
        parts: list[Any] = []
        for j, part in enumerate(message.content):
            if isinstance(part, InputAudioPart):
                heard = await _transcribe(request, part, f"messages[{i}].content[{j}]", seconds)
                seconds += heard.duration
                part = TextPart(type="text", text=(" " if j else "") + heard.text)
            parts.append(part)
        messages.append(message.model_copy(update={"content": parts}))
    text_body = body.model_copy(update={"messages": messages, "modalities": None, "audio": None})
    return SpokenTurn(text_body, seconds, speaker)


async def reply(
    turn: SpokenTurn,
    request: Request,
    st: EngineState,
    ids: list[int],
    scoring: ScoringPlan,
    gens: Sequence[Generation],
    writer: ChunkWriter,
) -> Response:
    """The answer, spoken when asked: whole (JSON), or as an SSE stream."""
    headers = {SECONDS_HEADER: f"{turn.audio_seconds:.3f}"}
    if turn.body.stream:
        events = guarded(scored_stream(st, ids, scoring, gens, _SpokenChunks(turn, writer).chunks))
        interval = st.settings.stream_interval
        return EventStream(events if interval <= 1 else grouped(events, interval), {**SSE_HEADERS, **headers})
    results, prompts = await unless_disconnected(request, scored_results(st, ids, scoring, gens))
    out = writer.whole(results, prompts)
    assert isinstance(out, ChatCompletionResponse)
    speaker = turn.speaker
    if speaker is not None:
        message = out.choices[0].message
        text = message.content or ""
        encoder = _ENCODER_FORMAT[speaker.fmt]
        data = await unless_disconnected(
            request, spoken_whole(speaker.voice, speaker.worker, text, 1.0, encoder, speaker.chunk_phonemes)
        )
        message.audio = ChatCompletionAudio(
            id=new_id("audio"), data=base64.b64encode(data).decode("ascii"), expires_at=now(), transcript=text
        )
        message.content = None
        turn.characters = len(text)
        headers[CHARACTERS_HEADER] = str(turn.characters)
    spoken = SpokenChatResponse.model_construct(**{**dict(out), "usage": turn.usage(out.usage)})
    return Response(spoken.model_dump_json(), media_type="application/json", headers=headers)


@dataclass
class _SpokenChunks:
    """The text reply's chunks made spoken: each content piece becomes a transcript piece, each
    sentence, once complete, its audio (base64 PCM; a WAV starts with a length-unknown header)."""

    turn: SpokenTurn
    writer: ChunkWriter
    audio_id: str = field(default_factory=lambda: new_id("audio"))
    pending: str = ""
    header_sent: bool = False

    async def chunks(
        self, events: AsyncIterator[tuple[int, Event]], prompts: Prompts
    ) -> AsyncIterator[ChatCompletionChunk]:
        async for chunk in self.writer.chunks(events, prompts):
            assert isinstance(chunk, ChatCompletionChunk)
            if not chunk.choices:  # the usage chunk
                yield SpokenChatChunk.model_construct(**{**dict(chunk), "usage": self.turn.usage(chunk.usage)})
                continue
            if self.turn.speaker is None:
                yield chunk
                continue
            async for c in self._spoken(chunk):
                yield c

    async def _spoken(self, chunk: ChatCompletionChunk) -> AsyncIterator[ChatCompletionChunk]:
        choice = chunk.choices[0]
        delta = choice.delta
        text = delta.content
        if delta.role is not None:
            delta.audio = ChatAudioDelta(id=self.audio_id)
        if text:
            delta.audio = ChatAudioDelta(id=delta.audio.id if delta.audio else None, transcript=text)
            self.pending += text
            self.turn.characters += len(text)
        delta.content = None
        if choice.finish_reason is None:
            yield chunk
            ends = list(_SENTENCE_END.finditer(self.pending))
            if ends:
                done, self.pending = self.pending[: ends[-1].end()], self.pending[ends[-1].end() :]
                async for c in self._say(done):
                    yield c
            return
        rest, self.pending = self.pending, ""
        async for c in self._say(rest):
            yield c
        if not self.header_sent and self.turn.speaker is not None and self.turn.speaker.fmt == "wav":
            yield self._data(b"")
        delta.audio = ChatAudioDelta(id=self.audio_id, expires_at=now())
        yield chunk

    async def _say(self, text: str) -> AsyncIterator[ChatCompletionChunk]:
        speaker = self.turn.speaker
        assert speaker is not None
        async with speaker.worker.session() as session:  # one espeak-ng run, chunks in turn with others'
            chunks = await chunked(speaker.voice, text, 1.0, speaker.chunk_phonemes)
            async for part in samples(speaker.voice, session, chunks, 1.0):
                yield self._data(pcm16(part))

    def _data(self, pcm: bytes) -> ChatCompletionChunk:
        speaker = self.turn.speaker
        assert speaker is not None
        if speaker.fmt == "wav" and not self.header_sent:
            pcm = wav_header(speaker.voice.rate) + pcm
        self.header_sent = True
        data = base64.b64encode(pcm).decode("ascii")
        return self.writer.chunk(0, ChatDelta(audio=ChatAudioDelta(id=self.audio_id, data=data)))
