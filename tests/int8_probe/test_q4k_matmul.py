"""The ``Q4KMatMul`` custom op (genmesh.engine.native: the file's Q4_K blocks x Q8_K activations, AVX2 ``maddubs``),
one layer at a time through OpenVINO's CPU plugin, against an fp64 numpy reference of the same blocks.

The blocks are random bytes in ggml's ``block_q4_K`` layout (f16 d and dmin, 12 bytes of packed 6-bit scales and
minimums, 128 bytes of nibbles): every byte pattern is a valid block, so this covers every scale and minimum. The
weights are checked against ``gguf``'s own Q4_K dequantiser. Two references, as for Q4_1: the layer on the
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

from genmesh.engine.core.gguf_kquants import q4_k
from genmesh.engine.native.q41_op import QK_K, q4k_matmul
from int8_probe import q41
from int8_probe.bench_layer import q4k_blocks

F32 = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 2, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


def weights(blocks: np.ndarray) -> np.ndarray:
    """W [n, k] in fp64, exactly: ``d*sc*q - dmin*mn`` per sub-block of 32 (gguf_kquants.q4_k's f32 factors)."""
    w = q4_k(blocks)
    assert w.m is not None
    exact = w.scale.astype(np.float64)[..., None] * w.q + w.m.astype(np.float64)[..., None]
    return np.asarray(exact.reshape(len(blocks), -1), np.float64)


def quantise_q8_k(x: np.ndarray) -> np.ndarray:
    """``x`` [M, K] as the kernel sees it: per 256, ``dx * round(x / dx)``, ``dx = max|x| / 127`` (f32, ties even)."""
    xb = np.asarray(x, np.float32).reshape(x.shape[0], -1, QK_K)
    dx = np.abs(xb).max(axis=-1, keepdims=True) / np.float32(127)
    inv = np.where(dx != 0, np.float32(1) / np.where(dx != 0, dx, 1), np.float32(0)).astype(np.float32)
    return np.asarray((np.rint(xb * inv).astype(np.float64) * dx.astype(np.float64)).reshape(x.shape))


def layer(core: ov.Core, k: int, blocks: np.ndarray, kernel: str) -> Any:
    x = ops.parameter([-1, -1, k], np.float32)
    model = ov.Model([q4k_matmul(x.output(0), blocks, kernel).output(0)], [x])
    return core.compile_model(q41.through_ir(core, model), "CPU", F32)


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_weights_are_ggml_q4_k() -> None:
    blocks = q4k_blocks(np.random.default_rng(1), 8, 512)
    ggml = quants.dequantize(blocks, GGMLQuantizationType.Q4_K).reshape(8, 512)
    np.testing.assert_allclose(weights(blocks), ggml, rtol=0, atol=1e-6)


# (K, N): the 1.5B's ffn_up shape (1,536 -> 8,960, cut to 264 columns: 33 groups of 8 over both threads), one
# super-block per row with odd N (a column outside the 4- and 2-column tiles); M across the decode tiles (1..3),
# the 4-row tile, the 64-row chunk, and a prefill chunk of 512.
@pytest.mark.parametrize(("k", "n", "rows"), [(1536, 264, (1, 2, 3, 4, 5, 32, 65)), (256, 7, (1, 3, 9, 512))])
def test_layer_matches_fp64_reference(core: ov.Core, k: int, n: int, rows: tuple[int, ...]) -> None:
    rng = np.random.default_rng(k + n)
    blocks = q4k_blocks(rng, n, k)
    w = weights(blocks)
    avx2, scalar = layer(core, k, blocks, "avx2"), layer(core, k, blocks, "scalar")
    for m in rows:
        x = rng.standard_normal((1, m, k)).astype(np.float32)
        y = avx2(x)[0]
        assert y.shape == (1, m, n)
        as_quantised = (quantise_q8_k(x.reshape(m, k)) @ w.T).reshape(y.shape)
        assert rel(y, as_quantised) < 1e-5, m  # the integer dot products and scales, to f32 rounding
        assert rel(y, (x.reshape(m, k).astype(np.float64) @ w.T).reshape(y.shape)) < 0.03, m  # int8 x: ~1 %
        assert rel(scalar(x)[0], as_quantised) < 1e-5, m


def test_zero_rows_stay_finite_and_bad_blocks_are_refused(core: ov.Core) -> None:
    rng = np.random.default_rng(7)
    blocks = q4k_blocks(rng, 16, 512)
    x = rng.standard_normal((1, 3, 512)).astype(np.float32)
    x[0, 1, :] = 0.0  # a row of zero super-blocks: scale 0, no division by it
    x[0, 2, :256] = 0.0
    y = layer(core, 512, blocks, "avx2")(x)[0][0]
    assert np.isfinite(y).all()
    assert not y[1].any()
    np.testing.assert_allclose(y[2], (quantise_q8_k(x[0, 2:3]) @ weights(blocks).T)[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(Exception, match="Q4_K blocks of 144 bytes"):
        layer(core, 512, blocks[:, :-1], "avx2")
