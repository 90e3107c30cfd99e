"""Audio files that claim more than they hold, or more than an engine admits (issue 54): silence
written by libsndfile, then its header re-labelled. Each is small (FLAC and Vorbis compress silence
to almost nothing); none is bigger than a few hundred kB."""

from __future__ import annotations

import io
import struct

import numpy as np
import soundfile

BLOCK = 1 << 16


def silence(fmt: str, subtype: str, rate: int, channels: int, seconds: float) -> bytes:
    """``seconds`` of zeros in ``fmt``, written a block at a time (nothing of the whole length in memory)."""
    out = io.BytesIO()
    zeros = np.zeros((BLOCK, channels), dtype=np.float32)
    with soundfile.SoundFile(out, "w", rate, channels, format=fmt, subtype=subtype) as f:
        left = int(seconds * rate)
        while left > 0:
            f.write(zeros[: min(BLOCK, left)])
            left -= BLOCK
    return out.getvalue()


def flac_claiming(flac: bytes, frames: int) -> bytes:
    """``flac`` with its STREAMINFO's total sample count (36 bits; 0: unknown) set to ``frames``."""
    b = bytearray(flac)
    assert b[:4] == b"fLaC", "not a FLAC"
    assert b[4] & 0x7F == 0, "STREAMINFO is a FLAC's first block"
    word = int.from_bytes(b[18:26], "big")  # rate (20 bits), channels (3), bits (5), total samples (36)
    b[18:26] = ((word & ~((1 << 36) - 1)) | frames).to_bytes(8, "big")
    return bytes(b)


def wav_claiming(wav: bytes, data_bytes: int) -> bytes:
    """``wav`` with its ``data`` chunk's size (and the RIFF size) set to ``data_bytes``."""
    b = bytearray(wav)
    at = b.index(b"data")
    b[at + 4 : at + 8] = struct.pack("<I", data_bytes)
    b[4:8] = struct.pack("<I", min(0xFFFFFFFF, at + 8 - 8 + data_bytes))
    return bytes(b)


def ogg_claiming(ogg: bytes, granule: int) -> bytes:
    """``ogg`` with its last page's granule position (a Vorbis file's length, in frames) set to ``granule``
    (libsndfile reads the length there when the file has two audio pages or more)."""
    b = bytearray(ogg)
    at = b.rindex(b"OggS")
    segments = b[at + 26]
    end = at + 27 + segments + sum(b[at + 27 : at + 27 + segments])
    b[at + 6 : at + 14] = struct.pack("<q", granule)
    b[at + 22 : at + 26] = b"\0\0\0\0"
    b[at + 22 : at + 26] = struct.pack("<I", _ogg_crc(bytes(b[at:end])))
    return bytes(b)


def _ogg_crc(page: bytes) -> int:
    """Ogg's page checksum: CRC-32, polynomial 0x04C11DB7, not reflected, initial 0 (RFC 3533)."""
    crc = 0
    for byte in page:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if crc & 0x80000000 else (crc << 1) & 0xFFFFFFFF
    return crc
