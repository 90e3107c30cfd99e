"""The ``Q41MatMul`` custom op (genmesh.engine.native: Q4_1 weights x Q8_1 activations, AVX2 ``maddubs``), one layer
at a time through OpenVINO's CPU plugin, against an fp64 numpy reference of the same blocks.

Blocks come from ``gguf``'s own Q4_1 quantiser (ggml's format, byte for byte). Two references: the layer on the
activations as given (what the exact form computes; the op differs by its int8 activations: measured ~0.5 %
relative, as llama.cpp's Q4_1 x Q8_1), and the layer on the activations as the op quantises them (what its
integer arithmetic must reproduce to f32 rounding: measured ~1e-7).

The extension is the engine's (genmesh.engine.native: built by make native, cached by source hash; built here
with cmake and g++ in ~10 s when missing).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from gguf import GGMLQuantizationType, quants

from int8_probe import q41
from int8_probe.bench_layer import exact_layer

F32 = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 2, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


def gguf_blocks(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Q4_1 blocks [n, k/32*20] of random weights, quantised by the gguf package (ggml's layout)."""
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
    return np.asarray(quants.quantize(w, GGMLQuantizationType.Q4_1), dtype=np.uint8).reshape(n, -1)


def layer(core: ov.Core, k: int, blocks: np.ndarray, kernel: str) -> Any:
    x = ops.parameter([-1, -1, k], np.float32)
    model = ov.Model([q41.q41_matmul(x.output(0), blocks, kernel).output(0)], [x])
    return core.compile_model(q41.through_ir(core, model), "CPU", F32)


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_blocks_are_ggml_q4_1() -> None:
    rng = np.random.default_rng(1)
    blocks = gguf_blocks(rng, 8, 128)
    q, d, m = q41.unpack_blocks(blocks)
    ggml = quants.dequantize(blocks, GGMLQuantizationType.Q4_1).reshape(8, 128)
    mine = (d.astype(np.float32)[..., None] * q + m.astype(np.float32)[..., None]).reshape(8, 128)
    np.testing.assert_allclose(mine, ggml, rtol=0, atol=1e-6)
    assert np.array_equal(q41.pack_blocks(q, d, m), blocks)


# (K, N, M): the SmolLM2 gate/up shape; odd N (a weight row outside the 2-row tile), M off the 4-row tile and
# across the 64-row chunk, one block per row; M = 512 (a prefill chunk).
SHAPES = [(576, 1536, 1), (576, 1536, 32), (64, 7, 5), (32, 3, 70), (576, 96, 512)]


@pytest.mark.parametrize("kernel", ["avx2", "scalar"])
@pytest.mark.parametrize(("k", "n", "m"), SHAPES)
def test_layer_matches_fp64_reference(core: ov.Core, kernel: str, k: int, n: int, m: int) -> None:
    rng = np.random.default_rng(k * n + m)
    blocks = gguf_blocks(rng, n, k)
    x = rng.standard_normal((1, m, k)).astype(np.float32)
    y = layer(core, k, blocks, kernel)(x)[0]
    assert y.shape == (1, m, n)
    exact = q41.reference(x, blocks).reshape(y.shape)
    as_quantised = q41.reference(q41.quantise_q8_1(x.reshape(m, k)), blocks).reshape(y.shape)
    assert rel(y, as_quantised) < 1e-5  # the integer dot products and block scales, to f32 rounding
    assert rel(y, exact) < 0.02  # int8 activations: ~0.5 % measured


# The M > 1 kernel (eight output columns repacked per group, four activation rows per tile): every row count
# on both sides of the 4-row tile and the M = 1 path, and N with tails outside the groups of eight (N = 4: no
# group at all; 13 = 8 + 5; 203 = 25 * 8 + 3, split across both threads).
GEMM_ROWS = (1, 3, 4, 5, 8, 17, 64, 65, 512)


@pytest.mark.parametrize(("k", "n"), [(64, 4), (128, 13), (96, 203)])
def test_every_row_count_and_column_tail_matches_fp64(core: ov.Core, k: int, n: int) -> None:
    rng = np.random.default_rng(11 * n + k)
    blocks = gguf_blocks(rng, n, k)
    avx2, scalar = layer(core, k, blocks, "avx2"), layer(core, k, blocks, "scalar")
    for m in GEMM_ROWS:
        x = rng.standard_normal((1, m, k)).astype(np.float32)
        y = avx2(x)[0]
        assert y.shape == (1, m, n)
        as_quantised = q41.reference(q41.quantise_q8_1(x.reshape(m, k)), blocks).reshape(y.shape)
        assert rel(y, as_quantised) < 1e-5, m  # measured ~1e-7: f32 rounding only
        assert rel(y, q41.reference(x, blocks).reshape(y.shape)) < 0.02, m  # int8 activations: ~0.5 %
        np.testing.assert_allclose(y, scalar(x)[0], rtol=1e-4, atol=1e-4)


def test_kernels_agree_and_zero_blocks_stay_finite(core: ov.Core) -> None:
    rng = np.random.default_rng(7)
    blocks = gguf_blocks(rng, 40, 256)
    x = rng.standard_normal((2, 9, 256)).astype(np.float32)
    x[0, 3, :] = 0.0  # a row of zero blocks: scale 0, no division by it
    x[1, 2, 32:64] = 0.0
    y_avx2 = layer(core, 256, blocks, "avx2")(x)[0]
    y_scalar = layer(core, 256, blocks, "scalar")(x)[0]
    assert np.isfinite(y_avx2).all()
    np.testing.assert_allclose(y_avx2, y_scalar, rtol=1e-5, atol=1e-5)
    ref = q41.reference(x, blocks).reshape(y_avx2.shape)
    np.testing.assert_allclose(y_avx2[0, 3], ref[0, 3], atol=1e-6)  # sum(x) = 0: the minimums add nothing


def test_replacing_an_exact_form_matmul_keeps_its_product(core: ov.Core) -> None:
    """``replace_matmuls`` finds the exact form's Q4_1 matmul (u4 x f16 scale + M S(x)) and puts the op over
    the same blocks in its place."""
    rng = np.random.default_rng(3)
    n, k = 48, 128
    blocks = gguf_blocks(rng, n, k)
    q, d, m = q41.unpack_blocks(blocks)
    model = exact_layer(ov, ops, np, q, d, m)
    x = rng.standard_normal((1, 6, k)).astype(np.float32)
    before = core.compile_model(model, "CPU", F32)(x)[0]
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Add":
            op.set_friendly_name("MatMul_1/exact_minimum")
    assert q41.replace_matmuls(model) == ["MatMul_1/q41"]
    after = core.compile_model(q41.through_ir(core, model), "CPU", F32)(x)[0]
    ref = q41.reference(x, blocks).reshape(before.shape)
    assert rel(before, ref) < 1e-5
    assert rel(after, ref) < 0.02
    assert rel(after, q41.reference(q41.quantise_q8_1(x.reshape(6, k)), blocks).reshape(after.shape)) < 1e-5


@pytest.mark.parametrize("kernel", ["avx2", "scalar"])
def test_grouped_op_gives_each_matrix_the_per_matrix_product(core: ov.Core, kernel: str) -> None:
    """One ``Q41MatMul`` over several matrices of one input (q/k/v: 3 outputs, as gate/up's 2) quantises the input
    once and writes each matrix's product to its own output: bit-identical to an op per matrix (the same integer
    sums and column kernels), and within f32 rounding of fp64 on the activations as quantised. N = 24 + 13 + 203:
    whole groups of eight, tails, a matrix split across both threads; M = 1 (decode), 5, 70 (the repacked path)."""
    k, sizes = 128, (24, 13, 203)
    rng = np.random.default_rng(23)
    blocks = [gguf_blocks(rng, n, k) for n in sizes]
    x = ops.parameter([-1, -1, k], np.float32)
    group = q41.q41_matmul_group(x.output(0), blocks, kernel)
    assert group.get_output_size() == len(sizes)
    grouped = core.compile_model(q41.through_ir(core, ov.Model(list(group.outputs()), [x])), "CPU", F32)
    kinds = [str(op.get_rt_info()["layerType"].astype(str)) for op in grouped.get_runtime_model().get_ops()]
    assert kinds.count("Reference") == 1  # one node of the CPU plugin for the three matrices, no Split
    assert "Split" not in kinds
    singles = [layer(core, k, b, kernel) for b in blocks]
    for m in (1, 5, 70):
        xv = rng.standard_normal((1, m, k)).astype(np.float32)
        out = grouped(xv)
        for i, (b, single) in enumerate(zip(blocks, singles, strict=True)):
            y = out[i]
            assert y.shape == (1, m, sizes[i])
            assert np.array_equal(y, single(xv)[0]), (m, i)  # bit-identical to the per-matrix op
            as_quantised = q41.reference(q41.quantise_q8_1(xv.reshape(m, k)), b).reshape(y.shape)
            assert rel(y, as_quantised) < 1e-5, (m, i)


def test_grouping_the_ops_of_one_input_keeps_every_product(core: ov.Core) -> None:
    """``gguf_op_groups.group`` (the exact form's ``op_groups``) makes the ``Q41MatMul`` ops that read one input one
    grouped op, and leaves an op alone on its input: a layer's q/k/v (3) and o (1) here, 4 ops -> 2, the same
    outputs bit for bit."""
    from genmesh.engine.core.gguf_op_groups import group

    k = 64
    rng = np.random.default_rng(5)
    blocks = [gguf_blocks(rng, n, k) for n in (64, 8, 8, 24)]  # (o reads q: K = 64)
    x = ops.parameter([-1, -1, k], np.float32)
    q, kk, v = (q41.q41_matmul(x.output(0), b) for b in blocks[:3])
    o = q41.q41_matmul(ops.add(q.output(0), q.output(0)).output(0), blocks[3])
    outputs = [kk.output(0), v.output(0), o.output(0)]
    xv = rng.standard_normal((1, 3, k)).astype(np.float32)
    before = core.compile_model(q41.through_ir(core, ov.Model(outputs, [x])), "CPU", F32)(xv)
    model = ov.Model(outputs, [x])
    assert group(model) == 1
    kinds = [op.get_input_size() for op in model.get_ordered_ops() if op.get_type_name() == "Q41MatMul"]
    assert sorted(kinds) == [2, 4]  # o alone (x, blocks); q/k/v as one (x, 3 blocks)
    after = core.compile_model(q41.through_ir(core, model), "CPU", F32)(xv)
    for i in range(3):
        assert np.array_equal(after[i], before[i]), i


def test_interleaved_layout_moves_the_file_bytes() -> None:
    """``pack_q41_x8`` moves the file's bytes and no other: per group of eight rows and block, the rows' nibble
    bytes as dwords side by side (dword ``4 j + c`` = row c's bytes ``4 j .. 4 j + 3``), then their f16 d and m; the
    last N % 8 rows as they were."""
    from genmesh.engine.native.q41_op import pack_q41_x8

    rng = np.random.default_rng(31)
    n, k = 19, 96  # two groups and a tail of 3 rows, 3 blocks a row
    blocks = gguf_blocks(rng, n, k)
    packed = pack_q41_x8(blocks)
    assert packed.shape == blocks.shape
    assert packed.dtype == np.uint8
    assert np.array_equal(np.sort(packed.reshape(-1)), np.sort(blocks.reshape(-1)))
    assert np.array_equal(packed[16:], blocks[16:])
    flat = packed[:16].reshape(2, 3, 160)  # group, block, bytes
    file = blocks[:16].reshape(2, 8, 3, 20)  # group, row, block, bytes
    for g, b, c, j in ((0, 0, 0, 0), (1, 2, 7, 3), (0, 1, 5, 2)):
        assert np.array_equal(flat[g, b, 32 * j + 4 * c : 32 * j + 4 * c + 4], file[g, c, b, 4 + 4 * j : 8 + 4 * j])
        assert np.array_equal(flat[g, b, 128 + 2 * c : 130 + 2 * c], file[g, c, b, 0:2])  # d
        assert np.array_equal(flat[g, b, 144 + 2 * c : 146 + 2 * c], file[g, c, b, 2:4])  # m


@pytest.mark.parametrize("kernel", ["avx2", "scalar"])
def test_interleaved_op_is_the_file_layout_op_bit_for_bit(core: ov.Core, kernel: str) -> None:
    """``Q41X8MatMul`` over ``pack_q41_x8(blocks)`` (grouped: q/k/v's three outputs) gives the grouped
    ``Q41MatMul``'s outputs over the file's blocks bit for bit, and so stays within f32 rounding of fp64 on the
    activations as quantised. N = 24 + 13 + 203: whole groups, a tail of 5 and of 3 columns, a matrix split across
    both threads; M = 1 … 5 (every decode tile), 9 (tiles of 4 and 1), 70 and 512 (prefill chunks)."""
    from genmesh.engine.native.q41_op import pack_q41_x8, q41_x8_matmul

    k, sizes = 128, (24, 13, 203)
    rng = np.random.default_rng(29)
    blocks = [gguf_blocks(rng, n, k) for n in sizes]
    x = ops.parameter([-1, -1, k], np.float32)
    file = q41.q41_matmul_group(x.output(0), blocks, kernel)
    x8 = q41_x8_matmul(x.output(0), [pack_q41_x8(b) for b in blocks], kernel)
    assert x8.get_output_size() == len(sizes)
    compiled = core.compile_model(q41.through_ir(core, ov.Model([*file.outputs(), *x8.outputs()], [x])), "CPU", F32)
    kinds = [str(op.get_rt_info()["layerType"].astype(str)) for op in compiled.get_runtime_model().get_ops()]
    assert kinds.count("Reference") == 2
    for m in (1, 2, 3, 4, 5, 9, 70, 512):
        xv = rng.standard_normal((1, m, k)).astype(np.float32)
        out = compiled(xv)
        for i, b in enumerate(blocks):
            y, y8 = out[i], out[len(sizes) + i]
            assert y8.shape == (1, m, sizes[i])
            assert np.array_equal(y8, y), (m, i)
            as_quantised = q41.reference(q41.quantise_q8_1(xv.reshape(m, k)), b).reshape(y8.shape)
            assert rel(y8, as_quantised) < 1e-5, (m, i)


def test_interleaving_the_ops_keeps_every_product(core: ov.Core) -> None:
    """``gguf_op_x8.interleave`` (the exact form's last step) replaces every ``Q41MatMul``, grouped or not, by a
    ``Q41X8MatMul`` with the same outputs, bit for bit, and leaves the other ops alone."""
    from genmesh.engine.core.gguf_op_x8 import interleave

    k = 64
    rng = np.random.default_rng(37)
    blocks = [gguf_blocks(rng, n, k) for n in (64, 8, 8, 24)]
    x = ops.parameter([-1, -1, k], np.float32)
    qkv = q41.q41_matmul_group(x.output(0), blocks[:3])
    o = q41.q41_matmul(ops.add(qkv.output(0), qkv.output(0)).output(0), blocks[3])
    outputs = [qkv.output(1), qkv.output(2), o.output(0)]
    xv = rng.standard_normal((1, 6, k)).astype(np.float32)
    before = core.compile_model(q41.through_ir(core, ov.Model(outputs, [x])), "CPU", F32)(xv)
    model = ov.Model(outputs, [x])
    assert interleave(model) == 2
    types = sorted(op.get_type_name() for op in model.get_ops() if op.get_type_name().startswith("Q41"))
    assert types == ["Q41X8MatMul", "Q41X8MatMul"]
    after = core.compile_model(q41.through_ir(core, model), "CPU", F32)(xv)
    for i in range(3):
        assert np.array_equal(after[i], before[i]), i


def silu(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, np.float64)
    return np.asarray(v * 0.5 * (1.0 + np.tanh(v / 2.0)), np.float64)  # v * sigmoid(v), without exp's overflow


@pytest.mark.parametrize("kernel", ["avx2", "scalar"])
def test_swiglu_op_is_silu_of_gate_times_up(core: ov.Core, kernel: str) -> None:
    """``Q41SwiGLU(x, gate, up)`` = ``silu(x Wg^T) * (x Wu^T)``: one output, one ``Reference`` node; within f32 rounding
    of fp64 on the activations as quantised (the products are the grouped op's, the SiLU the op's own ``exp``).
    N = 203 (groups of eight, a tail of 3, split across both threads), M = 1, 3 (decode), 5, 70 (the repacked path);
    gate products far outside exp's range (|g| > 88) stay finite."""
    from genmesh.engine.native.q41_op import q41_swiglu

    k, n = 128, 203
    rng = np.random.default_rng(29)
    gate, up = gguf_blocks(rng, n, k), gguf_blocks(rng, n, k)
    x = ops.parameter([-1, -1, k], np.float32)
    op = q41_swiglu(x.output(0), gate, up, kernel)
    assert op.get_output_size() == 1
    compiled = core.compile_model(q41.through_ir(core, ov.Model([op.output(0)], [x])), "CPU", F32)
    kinds = [str(o.get_rt_info()["layerType"].astype(str)) for o in compiled.get_runtime_model().get_ops()]
    assert kinds.count("Reference") == 1
    assert "Eltwise" not in kinds
    for m in (1, 3, 5, 70):
        xv = rng.standard_normal((1, m, k)).astype(np.float32)
        xv[0, 0] *= 400.0  # gate products of hundreds: exp(-g) under- and overflows without the clamp
        y = compiled(xv)[0]
        assert y.shape == (1, m, n)
        assert np.isfinite(y).all()
        xq = q41.quantise_q8_1(xv.reshape(m, k))
        g, u = q41.reference(xq, gate), q41.reference(xq, up)
        assert np.abs(g).max() > 88.0
        ref = (silu(g) * u).reshape(y.shape)
        assert rel(y, ref) < 1e-5, m
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
