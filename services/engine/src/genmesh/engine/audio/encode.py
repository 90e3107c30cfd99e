"""Synthesised samples (float32, -1..1) to the response format asked: WAV, FLAC, MP3 and Ogg Opus through
libsndfile (soundfile), raw PCM as OpenAI sends it (16-bit little-endian, mono, at the voice's rate)."""

from __future__ import annotations

import io

import numpy as np
import soundfile

# response_format -> libsndfile (format, subtype); "pcm" is written directly.
FORMATS: dict[str, tuple[str, str]] = {
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_16"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
    "opus": ("OGG", "OPUS"),
}
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)


def pcm16(samples: np.ndarray) -> bytes:
    data: bytes = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    return data


def encode(samples: np.ndarray, rate: int, fmt: str) -> bytes:
    if fmt == "pcm":
        return pcm16(samples)
    container, subtype = FORMATS[fmt]
    if fmt == "opus" and rate not in OPUS_RATES:  # Opus runs at 48 kHz and a few divisors of it
        import soxr

        samples, rate = soxr.resample(samples, rate, 24000), 24000
    out = io.BytesIO()
    soundfile.write(out, np.clip(samples, -1.0, 1.0), rate, subtype=subtype, format=container)
    return out.getvalue()


def wav_header(rate: int) -> bytes:
    """A WAV header for a stream of unknown length (sizes 0xFFFFFFFF), as OpenAI's streamed WAV starts."""
    import struct

    byte_rate = rate * 2
    return (
        b"RIFF"
        + struct.pack("<I", 0xFFFFFFFF)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, byte_rate, 2, 16)
        + b"data"
        + struct.pack("<I", 0xFFFFFFFF)
    )
