"""The GGUF block types the exact form reads, unpacked in numpy as ggml lays them out.

Each matrix is unpacked into what OpenVINO GenAI's decompression reads (``scale`` per group of
weights, ``q`` the unsigned values, ``m`` the exact minimum the integer zero point misses) plus
the GenAI form of its scales (``genai_scale``: f16, how GenAI rounds them), by which the converter
finds the matrix in GenAI's model.

- Q4_1: ``w = d·q + m`` per 32 (``d``, ``m`` f16).
- Q4_K: super-blocks of 256: ``d``, ``dmin`` f16 and 6-bit ``sc``, ``mn`` per sub-block of 32,
  ``w = d·sc·q - dmin·mn``. GenAI's scale is ``f16(d·sc)``, a rounding (``d·sc`` needs 17 bits);
  ``scale`` here is the exact f32 product, ``m = -dmin·mn`` (exact in f32 too).
- Q6_K: super-blocks of 256: ``d`` f16 and int8 ``sc`` per sub-block of 16, ``w = d·sc·(q - 32)``,
  ``q`` 6 bits. GenAI reads it as u8 with the zero point 32 (exact) and the scale ``f16(d·sc)``.
- Q5_0: ``w = d·(q - 16)`` per 32, ``q`` 5 bits: exactly a Q8_0 block with the same ``d`` and the
  int8 ``q - 16`` (``q5_0_as_q8_0``), which GenAI reads exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

QK = 32  # weights per Q4_1 / Q4_0 / Q5_0 / Q8_0 block and per Q4_K sub-block
QK_K = 256  # weights per K-quant super-block


@dataclass(frozen=True)
class Blocks:
    """One matrix in numpy order: ``scale`` [rows, groups] (f16 where the file's is f16, else the
    exact f32), ``genai_scale`` the f16 scale GenAI builds, ``q`` [rows, groups, group] u8,
    ``m`` [rows, groups] f32 the exact per-group minimum (None: the zero point is exact); ``kind`` the GGUF type
    and ``raw`` [rows, bytes] the file's own blocks (what the int8 ops read)."""

    scale: Any
    genai_scale: Any
    q: Any
    m: Any | None
    kind: str = ""
    raw: Any | None = None

    def rows(self, order: Any) -> Blocks:
        m = None if self.m is None else self.m[order]
        raw = None if self.raw is None else self.raw[order]
        return Blocks(self.scale[order], self.genai_scale[order], self.q[order], m, self.kind, raw)


def _f16(blocks: Any, at: int) -> Any:
    import numpy as np

    return blocks[..., at : at + 2].copy().view(np.float16)[..., 0]


def q4_1(raw: Any) -> Blocks:
    import numpy as np

    blocks = np.asarray(raw, dtype=np.uint8).reshape(raw.shape[0], -1, 4 + QK // 2)
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    qs = blocks[..., 4:]
    q = np.concatenate([qs & 0xF, qs >> 4], axis=-1)  # ggml: low nibbles first, then high
    return Blocks(d, d, q, m.astype(np.float32), "Q4_1", blocks.reshape(raw.shape[0], -1))


def q4_k(raw: Any) -> Blocks:
    """Q4_K: 144 bytes per 256 weights: d, dmin (f16), 12 bytes of 6-bit (sc, mn) x 8, 128 of nibbles."""
    import numpy as np

    blocks = np.asarray(raw, dtype=np.uint8).reshape(raw.shape[0], -1, 4 + 12 + QK_K // 2)
    d = _f16(blocks, 0).astype(np.float32)[..., None]
    dmin = _f16(blocks, 2).astype(np.float32)[..., None]
    s = blocks[..., 4:16].astype(np.uint8)
    # ggml's get_scale_min_k4: sub-blocks 0..3 in the low 6 bits of s[0..3] / s[4..7]; 4..7 split
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 0xF) | ((s[..., 0:4] >> 6) << 4)], axis=-1)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], axis=-1)
    qs = blocks[..., 16:].reshape(*blocks.shape[:2], 4, QK)
    q = np.stack([qs & 0xF, qs >> 4], axis=-2)  # per 32 bytes: sub-block 2c low nibbles, 2c+1 high
    rows = raw.shape[0]
    scale = (d * sc).reshape(rows, -1)  # exact in f32: f16 x 6 bits
    m = -(dmin * mn).reshape(rows, -1)
    return Blocks(scale, scale.astype(np.float16), q.reshape(rows, -1, QK), m, "Q4_K", blocks.reshape(rows, -1))


def q6_k(raw: Any) -> Blocks:
    """Q6_K: 210 bytes per 256 weights: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, d (f16)."""
    import numpy as np

    blocks = np.asarray(raw, dtype=np.uint8).reshape(raw.shape[0], -1, 210)
    ql = blocks[..., :128].reshape(*blocks.shape[:2], 2, 64)
    qh = blocks[..., 128:192].reshape(*blocks.shape[:2], 2, 1, 32)
    sc = blocks[..., 192:208].copy().view(np.int8).astype(np.float32)
    d = _f16(blocks, 208).astype(np.float32)[..., None]
    low = np.stack([ql[..., :32] & 0xF, ql[..., 32:] & 0xF, ql[..., :32] >> 4, ql[..., 32:] >> 4], axis=-2)
    high = (qh >> np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]) & 3  # [.., 2 halves, 4 quarters, 32]
    q = low | (high << 4)
    rows = raw.shape[0]
    scale = (d * sc).reshape(rows, -1)  # exact in f32: f16 x 8 bits
    return Blocks(scale, scale.astype(np.float16), q.reshape(rows, -1, 16), None, "Q6_K", blocks.reshape(rows, -1))


UNPACK = {"Q4_1": q4_1, "Q4_K": q4_k, "Q6_K": q6_k}


def q8_0(raw: Any) -> Blocks:
    """Q8_0: 34 bytes per 32 weights: d (f16), 32 int8 ``q``; ``w = d * q``. OpenVINO GenAI reads it exactly (u8
    values ``q + 128``, zero point 128, the f16 ``d``): ``q`` here is its u8 values, for the int8 path to find the
    matrix (gguf_exact.py); not in UNPACK, as there is nothing to correct."""
    import numpy as np

    blocks = np.asarray(raw, dtype=np.uint8).reshape(raw.shape[0], -1, 2 + QK)
    d = _f16(blocks, 0)
    q = (blocks[..., 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
    return Blocks(d, d, q, None, "Q8_0", blocks.reshape(raw.shape[0], -1))


def q5_0_as_q8_0(raw: Any) -> Any:
    """A Q5_0 matrix's raw bytes as the Q8_0 bytes of the very same weights (same ``d``, int8 ``q - 16``)."""
    import numpy as np

    blocks = np.asarray(raw, dtype=np.uint8).reshape(raw.shape[0], -1, 2 + 4 + QK // 2)
    qh = blocks[..., 2:6].copy().view("<u4")[..., 0]
    qs = blocks[..., 6:]
    bits = ((qh[..., None] >> np.arange(QK, dtype=np.uint32)) & 1).astype(np.uint8) << 4
    q = np.concatenate([qs & 0xF, qs >> 4], axis=-1) | bits
    out = np.empty((*blocks.shape[:2], 2 + QK), dtype=np.uint8)
    out[..., :2] = blocks[..., :2]
    out[..., 2:] = (q.astype(np.int16) - 16).astype(np.int8).view(np.uint8)
    return out.reshape(raw.shape[0], -1)
