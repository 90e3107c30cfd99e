"""Synthesised samples (float32, -1..1) to the response format asked: WAV, FLAC, MP3 and Ogg Opus through
libsndfile (soundfile); AAC, which libsndfile cannot write, through PyAV (FFmpeg's native AAC encoder,
AAC-LC in an ADTS stream, as OpenAI's ``aac`` is); raw PCM as OpenAI sends it (16-bit little-endian,
mono, at the voice's rate)."""

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
ENCODED = (*FORMATS, "aac")  # every response_format sent whole
AAC_BIT_RATE = 64_000  # mono speech at 22,050 Hz


def pcm16(samples: np.ndarray) -> bytes:
    data: bytes = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    return data


def encode(samples: np.ndarray, rate: int, fmt: str) -> bytes:
    if fmt == "pcm":
        return pcm16(samples)
    if fmt == "aac":
        return aac(samples, rate)
    container, subtype = FORMATS[fmt]
    if fmt == "opus" and rate not in OPUS_RATES:  # Opus runs at 48 kHz and a few divisors of it
        import soxr

        samples, rate = soxr.resample(samples, rate, 24000), 24000
    out = io.BytesIO()
    soundfile.write(out, np.clip(samples, -1.0, 1.0), rate, subtype=subtype, format=container)
    return out.getvalue()


def aac(samples: np.ndarray, rate: int) -> bytes:
    """AAC-LC in ADTS frames (``audio/aac``); PyAV converts the samples to the encoder's planar float
    and cuts them into its 1,024-sample frames."""
    import av

    mono = np.ascontiguousarray(np.clip(samples, -1.0, 1.0), dtype=np.float32).reshape(1, -1)
    out = io.BytesIO()
    with av.open(out, "w", format="adts") as container:
        stream = container.add_stream("aac", rate=rate, layout="mono")
        stream.bit_rate = AAC_BIT_RATE
        frame = av.AudioFrame.from_ndarray(mono, format="flt", layout="mono")
        frame.sample_rate = rate
        for packet in (*stream.encode(frame), *stream.encode(None)):
            container.mux(packet)
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
