"""OpenAI's audio endpoints: ``/v1/audio/speech`` (JSON in, audio bytes out) and
``/v1/audio/transcriptions`` (multipart in; JSON, text, subtitles or an SSE stream out)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from .common import StrictRequest
from .errors import from_validation_error, invalid_request
from .whisper_languages import language_code

# OpenAI's voice names: the SDK requires one of them (or any string); each maps to a served voice.
OPENAI_VOICES = (
    "alloy",
    "ash",
    "ballad",
    "coral",
    "echo",
    "fable",
    "onyx",
    "nova",
    "sage",
    "shimmer",
    "verse",
    "marin",
    "cedar",
)
SpeechFormat = Literal["wav", "pcm", "flac", "mp3", "opus", "aac"]
TranscriptionFormat = Literal["json", "text", "srt", "vtt", "verbose_json"]
SPEECH_MEDIA_TYPES: dict[str, str] = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
}


class SpeechRequest(StrictRequest):
    model: str | None = None
    input: Annotated[str, Field(min_length=1)]
    # None: the served voice (OPEA's speech requests may name none; their default is "default")
    voice: str | dict[str, str] | None = None
    instructions: str | None = None
    response_format: SpeechFormat = "mp3"
    speed: Annotated[float, Field(ge=0.25, le=4.0)] = 1.0
    stream_format: Literal["audio", "sse"] = "audio"

    def voice_name(self) -> str:
        """The voice named: a string, or OpenAI's ``{"id": ...}`` form ("" when none is)."""
        if self.voice is None:
            return ""
        return self.voice if isinstance(self.voice, str) else self.voice.get("id", "")


# genmesh's metering of a streamed speech reply cut short (the engine's ``audio/sent.py``): the gateway
# names each speech request (this header, its own id for it), and asks ``SPEECH_SENT_PATH`` once, after a
# reply it did not relay whole, how many of the input's characters went out.
SPEECH_ID_HEADER = "x-genmesh-speech-id"
SPEECH_SENT_PATH = "/v1/audio/speech/sent"


class SpeechSentQuery(StrictRequest):
    speech_id: Annotated[str, Field(min_length=1, max_length=128)]


class SpeechSent(BaseModel):
    """The characters of a streamed speech reply's input that were sent (the share of its phonemes
    handed to the connection, rounded up), and whether the reply had ended when asked."""

    speech_id: str
    characters: int
    ended: bool


class TranscriptionRequest(StrictRequest):
    """The form fields of ``/v1/audio/transcriptions`` beside ``file`` (multipart, so every value
    arrives as a string; lists as repeated ``name[]`` fields, as the OpenAI SDK sends them)."""

    model: str | None = None
    language: Annotated[str, Field(pattern=r"^[a-z]{2,3}$")] | None = None
    prompt: str | None = None
    temperature: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    response_format: TranscriptionFormat = "json"
    timestamp_granularities: list[Literal["word", "segment"]] = Field(default_factory=list)
    stream: bool = False
    include: list[Literal["logprobs"]] = Field(default_factory=list)
    chunking_strategy: str | None = None

    @field_validator("language", mode="before")
    @classmethod
    def _language_name(cls, value: object) -> object:
        """Whisper's language names (``english``, as OPEA's Whisper service sends) mean their code;
        ``auto`` (OPEA's default) means none: Whisper detects it."""
        if not isinstance(value, str):
            return value
        code = language_code(value)
        return None if code == "auto" else code

    @classmethod
    def from_form(cls, fields: Iterable[tuple[str, str]]) -> TranscriptionRequest:
        """The request from the form's text fields (400 naming the field at the first bad one)."""
        values: dict[str, str | list[str]] = {}
        for name, value in fields:
            if name.endswith("[]"):
                listed = values.setdefault(name[:-2], [])
                if isinstance(listed, list):
                    listed.append(value)
            elif name in ("timestamp_granularities", "include"):
                listed = values.setdefault(name, [])
                if isinstance(listed, list):
                    listed.append(value)
            elif name in values:
                raise invalid_request(f"parameter '{name}' is given more than once", param=name)
            else:
                values[name] = value
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise from_validation_error(exc) from None


class TranscriptionWord(BaseModel):
    word: str
    start: float
    end: float


class TranscriptionSegment(BaseModel):
    id: int
    seek: int = 0
    start: float
    end: float
    text: str
    tokens: list[int] = Field(default_factory=list)
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0


class TranscriptionUsage(BaseModel):
    """OpenAI's duration usage (whisper-1 bills by the second)."""

    type: Literal["duration"] = "duration"
    seconds: float


class Transcription(BaseModel):
    text: str
    usage: TranscriptionUsage | None = None


class TranscriptionVerbose(BaseModel):
    task: Literal["transcribe"] = "transcribe"
    language: str
    duration: float
    text: str
    segments: list[TranscriptionSegment] | None = None
    words: list[TranscriptionWord] | None = None
    usage: TranscriptionUsage | None = None


class TranscriptTextDelta(BaseModel):
    type: Literal["transcript.text.delta"] = "transcript.text.delta"
    delta: str


class TranscriptTextDone(BaseModel):
    type: Literal["transcript.text.done"] = "transcript.text.done"
    text: str
    usage: TranscriptionUsage | None = None


def timestamp(seconds: float, separator: str) -> str:
    """``HH:MM:SS,mmm`` (SRT, separator ",") or ``HH:MM:SS.mmm`` (WebVTT, ".")."""
    ms = round(seconds * 1000)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{separator}{ms:03d}"


def srt(segments: list[TranscriptionSegment]) -> str:
    cues = [
        f"{i + 1}\n{timestamp(s.start, ',')} --> {timestamp(s.end, ',')}\n{s.text.strip()}\n"
        for i, s in enumerate(segments)
    ]
    return "\n".join(cues)


def vtt(segments: list[TranscriptionSegment]) -> str:
    cues = [f"{timestamp(s.start, '.')} --> {timestamp(s.end, '.')}\n{s.text.strip()}\n" for s in segments]
    return "WEBVTT\n\n" + "\n".join(cues)
