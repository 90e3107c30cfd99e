"""The ``Q4KMatMul`` and ``Q6KMatMul`` custom ops (genmesh.engine.native: the file's Q4_K / Q6_K blocks x Q8_K
activations, AVX2 ``maddubs``), and ``Q4KX8MatMul`` / ``Q6KX8MatMul`` (the same blocks interleaved eight rows at a
time), one layer at a time through OpenVINO's CPU plugin, against an fp64 numpy reference of the same blocks.

The blocks are random bytes in ggml's ``block_q4_K`` layout (f16 d and dmin, 12 bytes of packed 6-bit scales and
minimums, 128 bytes of nibbles) or ``block_q6_K`` (128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales,
f16 d): every byte pattern is a valid block, so this covers every scale, minimum and value. The weights are
checked against ``gguf``'s own dequantisers. Two references, as for Q4_1: the layer on the
activations as given (the op differs by its int8 activations per 256: measured ~1 % relative), and on the
activations as the op quantises them (its integer arithmetic to f32 rounding: measured ~1e-7).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from gguf import GGMLQuantizationType, quants

from genmesh.engine.core.gguf_kquants import UNPACK
from genmesh.engine.native.q41_op import K_OPS, Q4K_X8, Q6K_X8, QK_K, X8_OPS, kquant_matmul, x8_matmul
from int8_probe import q41
from int8_probe.bench_layer import kquant_blocks

F32 = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 2, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
KINDS = ("Q4_K", "Q6_K")


def weights(kind: str, blocks: np.ndarray) -> np.ndarray:
    """W [n, k] in fp64, exactly: Q4_K ``d*sc*q - dmin*mn`` per 32, Q6_K ``d*sc*(q - 32)`` per 16 (gguf_kquants'
    f32 factors, exact products)."""
    w = UNPACK[kind](blocks)
    scale = w.scale.astype(np.float64)[..., None]
    q = w.q.astype(np.float64) - (32 if w.m is None else 0)  # Q6_K: signed values, no minimum
    exact = scale * q + (0 if w.m is None else w.m.astype(np.float64)[..., None])
    return np.asarray(exact.reshape(len(blocks), -1), np.float64)


def quantise_q8_k(x: np.ndarray) -> np.ndarray:
    """``x`` [M, K] as the kernel sees it: per 256, ``dx * round(x / dx)``, ``dx = max|x| / 127`` (f32, ties even)."""
    xb = np.asarray(x, np.float32).reshape(x.shape[0], -1, QK_K)
    dx = np.abs(xb).max(axis=-1, keepdims=True) / np.float32(127)
    inv = np.where(dx != 0, np.float32(1) / np.where(dx != 0, dx, 1), np.float32(0)).astype(np.float32)
    return np.asarray((np.rint(xb * inv).astype(np.float64) * dx.astype(np.float64)).reshape(x.shape))


def layer(core: ov.Core, kind: str, k: int, blocks: np.ndarray, kernel: str) -> Any:
    x = ops.parameter([-1, -1, k], np.float32)
    model = ov.Model([kquant_matmul(kind, x.output(0), blocks, kernel).output(0)], [x])
    return core.compile_model(q41.through_ir(core, model), "CPU", F32)


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("kind", KINDS)
def test_weights_are_ggml_blocks(kind: str) -> None:
    blocks = kquant_blocks(np.random.default_rng(1), kind, 8, 512)
    ggml = quants.dequantize(blocks, GGMLQuantizationType[kind]).reshape(8, 512)
    np.testing.assert_allclose(weights(kind, blocks), ggml, rtol=0, atol=1e-6)


# (K, N): the 1.5B's ffn_up shape (1,536 -> 8,960, cut to 264 columns: 33 groups of 8 over both threads), one
# super-block per row with odd N (a column outside the 4- and 2-column tiles); M across the decode tiles (1..3),
# the 4-row tile, the 64-row chunk, and a prefill chunk of 512.
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("k", "n", "rows"), [(1536, 264, (1, 2, 3, 4, 5, 32, 65)), (256, 7, (1, 3, 9, 512))])
def test_layer_matches_fp64_reference(core: ov.Core, kind: str, k: int, n: int, rows: tuple[int, ...]) -> None:
    rng = np.random.default_rng(k + n)
    blocks = kquant_blocks(rng, kind, n, k)
    w = weights(kind, blocks)
    avx2, scalar = layer(core, kind, k, blocks, "avx2"), layer(core, kind, k, blocks, "scalar")
    for m in rows:
        x = rng.standard_normal((1, m, k)).astype(np.float32)
        y = avx2(x)[0]
        assert y.shape == (1, m, n)
        as_quantised = (quantise_q8_k(x.reshape(m, k)) @ w.T).reshape(y.shape)
        assert rel(y, as_quantised) < 1e-5, m  # the integer dot products and scales, to f32 rounding
        assert rel(y, (x.reshape(m, k).astype(np.float64) @ w.T).reshape(y.shape)) < 0.03, m  # int8 x: ~1 %
        assert rel(scalar(x)[0], as_quantised) < 1e-5, m


@pytest.mark.parametrize("kind", KINDS)
def test_zero_rows_stay_finite_and_bad_blocks_are_refused(core: ov.Core, kind: str) -> None:
    rng = np.random.default_rng(7)
    blocks = kquant_blocks(rng, kind, 16, 512)
    x = rng.standard_normal((1, 3, 512)).astype(np.float32)
    x[0, 1, :] = 0.0  # a row of zero super-blocks: scale 0, no division by it
    x[0, 2, :256] = 0.0
    y = layer(core, kind, 512, blocks, "avx2")(x)[0][0]
    assert np.isfinite(y).all()
    assert not y[1].any()
    np.testing.assert_allclose(y[2], (quantise_q8_k(x[0, 2:3]) @ weights(kind, blocks).T)[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(Exception, match=f"{kind} blocks of {K_OPS[kind][1]} bytes"):
        layer(core, kind, 512, blocks[:, :-1], "avx2")


def x8_layer(core: ov.Core, kind: str, k: int, packed: np.ndarray, kernel: str) -> Any:
    x = ops.parameter([-1, -1, k], np.float32)
    model = ov.Model([x8_matmul(kind, x.output(0), packed, kernel).output(0)], [x])
    return core.compile_model(q41.through_ir(core, model), "CPU", F32)


# From this many rows the file layout's op takes its eight-column kernel (Q4KMatMul from 8, Q6KMatMul from 24:
# GROUP_ROWS in q4k_matmul.cpp / q6k_matmul.cpp), whose float order the interleaved op shares (Q6KX8MatMul expands
# its blocks into that kernel's scratch from 24 rows)
SAME_ORDER_ROWS = {"Q4_K": 8, "Q6_K": 24}
X8_BYTES = {"Q4_K": Q4K_X8[1], "Q6_K": Q6K_X8[1]}  # per super-block and column


# (K, N): 264 columns of the 1.5B's ffn_up (33 groups of eight, no tail); 13 (one group and a tail of 5 in the
# file's layout); 7 (the tail alone). M across the interleaved kernel's row tiles (4, 3, 2, 1: 3 and 7 end on the
# three-row tile), Q4KX8MatMul's unpacked groups from 20 rows (X8_UNPACK_ROWS in q4k_matmul.cpp: 21 and 33) and a
# prefill chunk.
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("k", "n", "rows"), [(1536, 264, (1, 2, 3, 4, 6, 7, 8, 33)), (512, 13, (1, 2, 5, 9, 21)), (256, 7, (1, 3, 512))]
)
def test_interleaved_layout_matches_the_file_layout_and_fp64(
    core: ov.Core, kind: str, k: int, n: int, rows: tuple[int, ...]
) -> None:
    """``Q4KX8MatMul`` / ``Q6KX8MatMul`` over ``pack_q4k_x8`` / ``pack_q6k_x8(blocks)`` against fp64 of the same
    blocks on the activations as the op quantises them (< 1e-5 relative; measured <= 1.0e-7 / 2.1e-7, the scalar
    kernel's <= 1e-7), and against ``Q4KMatMul`` / ``Q6KMatMul`` over the file's layout: the same integer sums, so
    below 8 / 24 rows (where that op takes its row tiles) only the f32 order of the per-super-block sums differs
    (< 1e-6; measured <= 1.1e-7 / 2.1e-7), and from there (its eight-column kernel) and in the tail (the same row
    tiles) the outputs are bit-identical."""
    rng = np.random.default_rng(k + n + 1)
    blocks = kquant_blocks(rng, kind, n, k)
    packed = X8_OPS[kind][1](blocks)
    assert packed.shape == (n, k // QK_K * X8_BYTES[kind])
    w = weights(kind, blocks)
    rows_op = layer(core, kind, k, blocks, "avx2")
    avx2, scalar = x8_layer(core, kind, k, packed, "avx2"), x8_layer(core, kind, k, packed, "scalar")
    for m in rows:
        x = rng.standard_normal((1, m, k)).astype(np.float32)
        y = avx2(x)[0]
        assert y.shape == (1, m, n)
        as_quantised = (quantise_q8_k(x.reshape(m, k)) @ w.T).reshape(y.shape)
        assert rel(y, as_quantised) < 1e-5, m
        assert rel(scalar(x)[0], as_quantised) < 1e-5, m
        assert rel(y, rows_op(x)[0]) < 1e-6, m
        if m >= SAME_ORDER_ROWS[kind] or n < 8:
            assert np.array_equal(y, rows_op(x)[0]), m


@pytest.mark.parametrize("kind", KINDS)
def test_interleaved_layout_refuses_other_sizes(core: ov.Core, kind: str) -> None:
    """An IR of Q4_K's file layout (144 bytes a super-block) cannot be read as the interleaved op (148); Q6_K's
    interleaved layout has the file's size (210), so only its type name (and the cache key) tells them apart, and a
    block short is refused."""
    blocks = kquant_blocks(np.random.default_rng(3), kind, 16, 512)
    wrong = blocks if kind == "Q4_K" else blocks[:, :-1]
    with pytest.raises(Exception, match=f"{kind} x8 blocks of {X8_BYTES[kind]} bytes"):
        x8_layer(core, kind, 512, wrong, "avx2")
