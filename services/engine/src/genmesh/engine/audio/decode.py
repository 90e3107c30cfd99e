"""Uploaded audio to Whisper's input: 16 kHz mono float32. libsndfile (soundfile) reads WAV, FLAC,
Ogg Vorbis/Opus and MP3; soxr resamples. Whatever it cannot read is the client's fault: a 400 naming
``file``, never a 500.

What a header claims is checked before anything is allocated (``AudioLimits``: sample rate, channels,
duration), and the file is decoded in blocks of ``BLOCK_FRAMES``: each block is downmixed and
resampled (soxr's streaming resampler) before the next is read, so memory is bounded by the 16 kHz
mono output (1,800 s: 115 MB), never by the rate and channels a header claims. The duration is
checked again as the blocks come (a header can lie), and a set stop flag (the client left, the
deadline passed) ends the decoding between two blocks."""

from __future__ import annotations

import io
import re
import threading
from dataclasses import dataclass

import numpy as np
import soundfile
import soxr

from genmesh.protocol import OpenAIError, invalid_request

from .worker import Stopped

WHISPER_RATE = 16_000
# Frames read at a time: at the largest admitted file (8 channels) 2 MiB of float32.
BLOCK_FRAMES = 1 << 16
# libsndfile's frame count of a file that does not say its length (a FLAC streamed to a pipe).
UNKNOWN_FRAMES = 0x7FFF_FFFF_FFFF_FFFF


@dataclass(frozen=True)
class AudioLimits:
    """What an uploaded file may claim: the engine's ``audio_max_*`` settings."""

    max_duration_s: float
    max_sample_rate: int
    max_channels: int


def decode(data: bytes, limits: AudioLimits, stop: threading.Event | None = None) -> np.ndarray:
    """``data`` as 16 kHz mono float32; 400 (``file``) when empty, not audio, truncated, past a limit
    of ``limits``, or too long. ``stop`` set: ``Stopped`` at the next block."""
    if not data:
        raise invalid_request("the audio file is empty", param="file", code="invalid_file")
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as f:
            _check_header(f, limits)
            return _blocks(f, limits.max_duration_s, stop)
    except (soundfile.LibsndfileError, RuntimeError, ValueError, TypeError) as exc:
        raise invalid_request(
            f"the file could not be decoded as audio (wav, flac, ogg/opus or mp3): {exc}",
            param="file",
            code="invalid_file",
        ) from None


def _check_header(f: soundfile.SoundFile, limits: AudioLimits) -> None:
    """The rate, channels and length the header claims, against ``limits``, before any sample is read."""
    if f.samplerate <= 0 or f.channels <= 0:
        raise invalid_request("the audio file has no sample rate or channels", param="file", code="invalid_file")
    if f.samplerate > limits.max_sample_rate:
        raise invalid_request(
            f"the audio's sample rate is {f.samplerate} Hz, more than this server's limit of "
            f"{limits.max_sample_rate} Hz",
            param="file",
            code="audio_sample_rate_too_high",
        )
    if f.channels > limits.max_channels:
        raise invalid_request(
            f"the audio has {f.channels} channels, more than this server's limit of {limits.max_channels}",
            param="file",
            code="audio_too_many_channels",
        )
    if f.frames == UNKNOWN_FRAMES:
        raise invalid_request(
            "the audio file does not say its length (a stream written to a pipe?); send it with its length",
            param="file",
            code="invalid_file",
        )
    if f.frames > 0 and f.frames / f.samplerate > limits.max_duration_s:
        raise too_long(f.frames / f.samplerate, limits.max_duration_s)
    if _truncated(f.extra_info):
        raise invalid_request(
            "the audio file is truncated (its header promises more data)", param="file", code="invalid_file"
        )


def _blocks(f: soundfile.SoundFile, max_duration_s: float, stop: threading.Event | None) -> np.ndarray:
    """The samples, read, downmixed and resampled a block at a time."""
    rate = f.samplerate
    most = int(max_duration_s * rate)  # frames allowed
    resampler = soxr.ResampleStream(rate, WHISPER_RATE, 1, dtype="float32") if rate != WHISPER_RATE else None
    out: list[np.ndarray] = []
    frames = 0
    while True:
        if stop is not None and stop.is_set():
            raise Stopped
        block = f.read(BLOCK_FRAMES, dtype="float32", always_2d=True)
        if block.shape[0] == 0:
            break
        frames += block.shape[0]
        if frames > most:  # MP3 and some Ogg files do not say their length up front; a header can lie
            raise too_long(frames / rate, max_duration_s)
        mono = block.mean(axis=1, dtype=np.float32) if block.shape[1] > 1 else block[:, 0]
        out.append(resampler.resample_chunk(mono) if resampler is not None else mono)
    if frames == 0:
        raise invalid_request("the audio file holds no samples (empty or truncated)", param="file", code="invalid_file")
    if resampler is not None:
        out.append(resampler.resample_chunk(np.zeros(0, dtype=np.float32), last=True))
    return np.ascontiguousarray(np.concatenate(out), dtype=np.float32)


# libsndfile's log of a WAV/AIFF whose data chunk is shorter than its header says: "data : N (should be M)".
# N = 0xFFFFFFFF (or 0) is a stream's "length unknown" header (OpenAI's streamed WAV), not a truncation.
_SHORT_DATA = re.compile(r"^data\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)
UNKNOWN_LENGTHS = (0, 0xFFFFFFFF, 0x7FFFFFFF)


def _truncated(log: str) -> bool:
    found = _SHORT_DATA.search(log)
    return (
        found is not None and int(found.group(1)) not in UNKNOWN_LENGTHS and int(found.group(2)) < int(found.group(1))
    )


def too_long(seconds: float, limit: float) -> OpenAIError:
    return invalid_request(
        f"the audio is longer than this server's limit of {limit:g} s (at least {seconds:.1f} s)",
        param="file",
        code="audio_too_long",
    )
