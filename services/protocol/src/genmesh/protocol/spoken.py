"""A spoken chat turn on ``/v1/chat/completions``, as OpenAI's audio chat defines it: ``input_audio``
content parts (base64 WAV or MP3) in the messages, ``modalities: ["text", "audio"]`` with ``audio``
(voice and format) in the request, and the spoken answer in ``message.audio`` (whole) or
``delta.audio`` (streamed: transcript pieces, then base64 audio pieces, then the id's expiry)."""

from __future__ import annotations

import base64
import binascii
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .common import Usage
from .errors import OpenAIError, invalid_request

INPUT_AUDIO_FORMATS = ("wav", "mp3")
# OpenAI's output formats; "pcm16" is 16-bit little-endian mono PCM (the speech endpoint's "pcm").
ChatAudioFormat = Literal["wav", "aac", "mp3", "flac", "opus", "pcm16"]
# A streamed spoken answer goes out as it is synthesised: only formats that can be cut anywhere.
STREAMED_AUDIO_FORMATS = ("pcm16", "wav")


class InputAudio(BaseModel):
    model_config = ConfigDict(extra="allow")
    data: str
    format: str  # checked by ``input_audio_bytes``, so that the 400 names the part's own field

    def check_format(self, param: str) -> None:
        if self.format not in INPUT_AUDIO_FORMATS:
            raise invalid_request(
                f"input_audio format '{self.format}' is not supported; use one of: {', '.join(INPUT_AUDIO_FORMATS)}",
                param=f"{param}.format",
                code="invalid_value",
            )


class InputAudioPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["input_audio"]
    input_audio: InputAudio


def input_audio_bytes(part: InputAudioPart, param: str, limit: int) -> bytes:
    """The part's audio bytes (``param``: where the part is, as ``messages[i].content[j]``): 400 naming
    its ``input_audio.data`` when that is not base64 or empty, 413 when it decodes to over ``limit``
    bytes, 400 naming ``input_audio.format`` when it is not wav or mp3."""
    where = f"{param}.input_audio"
    part.input_audio.check_format(where)
    data = part.input_audio.data
    if len(data) // 4 * 3 > limit + 3:  # before decoding: base64 is 4 characters per 3 bytes
        raise too_large(f"{where}.data", limit)
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise invalid_request("input_audio data is not base64", param=f"{where}.data", code="invalid_base64") from None
    if not raw:
        raise invalid_request("input_audio data is empty", param=f"{where}.data", code="invalid_file")
    if len(raw) > limit:
        raise too_large(f"{where}.data", limit)
    return raw


def too_large(param: str, limit: int) -> OpenAIError:
    return OpenAIError(
        f"the audio is larger than this server's limit of {limit} bytes",
        status=413,
        param=param,
        code="file_too_large",
    )


class ChatAudioOutput(BaseModel):
    """``audio`` of a request: the voice (OpenAI's names, the served voice's own, or ``{"id": ...}``) and format."""

    model_config = ConfigDict(extra="forbid")
    voice: str | dict[str, str]
    format: ChatAudioFormat

    def voice_name(self) -> str:
        return self.voice if isinstance(self.voice, str) else self.voice.get("id", "")


class ChatCompletionAudio(BaseModel):
    """``message.audio``: the spoken answer, its text, and until when its id may be referred to."""

    id: str
    data: str
    expires_at: int
    transcript: str


class ChatAudioDelta(BaseModel):
    """``delta.audio`` of a stream chunk: the id first, then transcript and data pieces, the expiry last."""

    id: str | None = None
    transcript: str | None = None
    data: str | None = None
    expires_at: int | None = None


class SpokenUsage(Usage):
    """A spoken turn's usage: the tokens, and (genmesh's, for metering) the seconds of audio
    transcribed and the characters spoken, as OpenAI bills its audio endpoints."""

    audio_seconds: float = 0.0
    speech_characters: int = 0
