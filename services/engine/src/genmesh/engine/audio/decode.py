"""Uploaded audio to Whisper's input: 16 kHz mono float32. libsndfile (soundfile) reads WAV, FLAC,
Ogg Vorbis/Opus and MP3; soxr resamples. Whatever it cannot read is the client's fault: a 400 naming
``file``, never a 500."""

from __future__ import annotations

import io
import re

import numpy as np
import soundfile
import soxr

from genmesh.protocol import invalid_request

WHISPER_RATE = 16_000


def decode(data: bytes, max_duration_s: float) -> np.ndarray:
    """``data`` as 16 kHz mono float32; 400 (``file``) when empty, not audio, truncated or too long."""
    if not data:
        raise invalid_request("the audio file is empty", param="file", code="invalid_file")
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as f:
            if f.samplerate <= 0 or f.channels <= 0:
                raise invalid_request("the audio file has no sample rate or channels", param="file")
            if f.frames > 0 and f.frames / f.samplerate > max_duration_s:
                raise _too_long(f.frames / f.samplerate, max_duration_s)
            if _truncated(f.extra_info):
                raise invalid_request(
                    "the audio file is truncated (its header promises more data)", param="file", code="invalid_file"
                )
            rate = f.samplerate
            samples = f.read(dtype="float32", always_2d=True, frames=int(max_duration_s * rate) + 1)
    except (soundfile.LibsndfileError, RuntimeError, ValueError, TypeError) as exc:
        raise invalid_request(
            f"the file could not be decoded as audio (wav, flac, ogg/opus or mp3): {exc}",
            param="file",
            code="invalid_file",
        ) from None
    if samples.shape[0] == 0:
        raise invalid_request("the audio file holds no samples (empty or truncated)", param="file", code="invalid_file")
    if samples.shape[0] / rate > max_duration_s:  # MP3 and some Ogg files do not say their length up front
        raise _too_long(samples.shape[0] / rate, max_duration_s)
    mono = samples.mean(axis=1) if samples.shape[1] > 1 else samples[:, 0]
    if rate != WHISPER_RATE:
        mono = soxr.resample(mono, rate, WHISPER_RATE)
    return np.ascontiguousarray(mono, dtype=np.float32)


# libsndfile's log of a WAV/AIFF whose data chunk is shorter than its header says: "data : N (should be M)".
# N = 0xFFFFFFFF (or 0) is a stream's "length unknown" header (OpenAI's streamed WAV), not a truncation.
_SHORT_DATA = re.compile(r"^data\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)
UNKNOWN_LENGTHS = (0, 0xFFFFFFFF, 0x7FFFFFFF)


def _truncated(log: str) -> bool:
    found = _SHORT_DATA.search(log)
    return (
        found is not None and int(found.group(1)) not in UNKNOWN_LENGTHS and int(found.group(2)) < int(found.group(1))
    )


def _too_long(seconds: float, limit: float) -> Exception:
    return invalid_request(
        f"the audio is longer than this server's limit of {limit:g} s (at least {seconds:.1f} s)",
        param="file",
        code="audio_too_long",
    )
