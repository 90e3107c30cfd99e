"""The ``Q80MatMul`` custom op (genmesh.engine.native: the file's Q8_0 blocks x Q8_0 activations, AVX2 ``maddubs``
with llama.cpp's sign trick), one layer at a time through OpenVINO's CPU plugin, against an fp64 numpy reference of
the same blocks.

The blocks are random bytes in ggml's ``block_q8_0`` layout (f16 d, 32 int8): every byte pattern is a valid block,
so the values cover -128 too (which ggml's quantiser never writes, but a file may hold). The weights are checked
against ``gguf``'s own dequantiser. Two references, as for Q4_1: the layer on the activations as given (the op
differs by its int8 activations per 32: measured 0.43-0.57 % relative), and on the activations as the op quantises
them (its integer arithmetic to f32 rounding: measured at most 1.0e-7).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from gguf import GGMLQuantizationType, quants

from genmesh.engine.native.q41_op import kquant_matmul
from int8_probe import q41
from int8_probe.bench_layer import q8_0_blocks

F32 = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 2, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


def weights(blocks: np.ndarray) -> np.ndarray:
    """W [n, k] in fp64, exactly: ``d * q`` per 32."""
    b = blocks.reshape(len(blocks), -1, 34)
    d = np.ascontiguousarray(b[..., 0:2]).view(np.float16).astype(np.float64)
    return np.asarray((d * b[..., 2:].view(np.int8)).reshape(len(blocks), -1), np.float64)


def layer(core: ov.Core, k: int, blocks: np.ndarray, kernel: str) -> Any:
    x = ops.parameter([-1, -1, k], np.float32)
    model = ov.Model([kquant_matmul("Q8_0", x.output(0), blocks, kernel).output(0)], [x])
    return core.compile_model(q41.through_ir(core, model), "CPU", F32)


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_weights_are_ggml_blocks() -> None:
    blocks = q8_0_blocks(np.random.default_rng(1), 8, 128)
    ggml = quants.dequantize(blocks, GGMLQuantizationType.Q8_0).reshape(8, 128)
    np.testing.assert_allclose(weights(blocks), ggml, rtol=0, atol=1e-7)
    assert (blocks.reshape(8, -1, 34)[..., 2:].view(np.int8) == -128).any()  # the sign trick's edge


# (K, N, M): SmolLM2's output matrix's K (576: 18 blocks) with N cut to 264 columns (33 groups of 8 over both
# threads), M across the decode tiles (1..3), the 4-row tile and its tails (5), the eight-column kernel from 8 rows
# (9, 32, and 65 across the 64-row chunk); odd N with one block per row (a column outside the 4- and 2-column
# tiles), a prefill chunk of 512; N = 13 (a group of eight and five columns of tiles) either side of 8 rows.
@pytest.mark.parametrize(
    ("k", "n", "rows"), [(576, 264, (1, 2, 3, 4, 5, 9, 32, 65)), (32, 7, (1, 3, 9, 512)), (64, 13, (7, 8, 17))]
)
def test_layer_matches_fp64_reference(core: ov.Core, k: int, n: int, rows: tuple[int, ...]) -> None:
    rng = np.random.default_rng(k + n)
    blocks = q8_0_blocks(rng, n, k)
    w = weights(blocks)
    avx2, scalar = layer(core, k, blocks, "avx2"), layer(core, k, blocks, "scalar")
    for m in rows:
        x = rng.standard_normal((1, m, k)).astype(np.float32)
        y = avx2(x)[0]
        assert y.shape == (1, m, n)
        as_quantised = (q41.quantise_q8_1(x.reshape(m, k)) @ w.T).reshape(y.shape)
        assert rel(y, as_quantised) < 1e-5, m  # the integer dot products and scales, to f32 rounding
        assert rel(y, (x.reshape(m, k).astype(np.float64) @ w.T).reshape(y.shape)) < 0.02, m  # int8 x: ~0.5 %
        assert rel(scalar(x)[0], as_quantised) < 1e-5, m


def test_zero_rows_stay_finite_and_bad_blocks_are_refused(core: ov.Core) -> None:
    rng = np.random.default_rng(7)
    blocks = q8_0_blocks(rng, 16, 256)
    x = rng.standard_normal((1, 3, 256)).astype(np.float32)
    x[0, 1, :] = 0.0  # a row of zero blocks: scale 0, no division by it
    x[0, 2, :64] = 0.0
    y = layer(core, 256, blocks, "avx2")(x)[0][0]
    assert np.isfinite(y).all()
    assert not y[1].any()
    np.testing.assert_allclose(y[2], (q41.quantise_q8_1(x[0, 2:3]) @ weights(blocks).T)[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(Exception, match="Q8_0 blocks of 34 bytes"):
        layer(core, 256, blocks[:, :-1], "avx2")
