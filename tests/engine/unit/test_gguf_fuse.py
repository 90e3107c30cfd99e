"""gguf_fuse on Q4_K-shaped branches (f32 scales ``d·sc`` and f32 minimums ``-dmin·m``, as gguf_exact writes a
Q4_K matrix): the groups of one input fused, each in the zero-point form, compute ``W x + M S(x)`` of the same
values; a block whose scale is 0 and whose values differ keeps its group in ``W x + M S(x)`` (no zero point gives
it), still fused. The Q4_1 form is covered on the real model by tests/int8_probe/test_fuse_probe.py and pinned by
``make model`` (fetch_model's weights digest)."""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from genmesh.engine.core.gguf_fuse import fuse, groups

K, BLOCKS, TOKENS = 128, 4, 5
F32 = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}  # as the engine (DQ off)


def packed_u4(q: np.ndarray) -> Any:
    flat = q.reshape(-1).astype(np.uint8)
    packed = flat[0::2] | (flat[1::2] << 4)
    return ov.op.Constant(ov.Tensor(packed, ov.Shape(list(q.shape)), ov.Type.u4), shared_memory=False)


def q4_k_branch(x: Any, sums: Any, q: np.ndarray, d: np.ndarray, m: np.ndarray) -> Any:
    """``Convert(Reshape(Multiply(Convert(u4), d))) x + M S(x)``: gguf_exact's Q4_K matrix."""
    n = q.shape[0]
    weight = ops.multiply(ops.convert(packed_u4(q), "f32"), ops.constant(d[..., None].astype(np.float32)))
    weight = ops.convert(ops.reshape(weight, ops.constant(np.array([n, K], dtype=np.int64)), False), "f32")
    minimum = ops.matmul(sums, ops.constant(m.astype(np.float32)), False, True)
    return ops.add(ops.matmul(x, weight, False, True), minimum)


def model_of(rows: tuple[int, ...], rng: np.random.Generator, constant_block: bool) -> ov.Model:
    x = ops.parameter([1, TOKENS, K], ov.Type.f32, name="x")
    sums = ops.reduce_sum(
        ops.reshape(x, ops.constant(np.array([0, 0, BLOCKS, 32], dtype=np.int64)), True),
        ops.constant(np.array([-1])),
        False,
    )
    outputs = []
    for i, n in enumerate(rows):
        q = rng.integers(0, 16, (n, BLOCKS, 32))
        d = rng.random((n, BLOCKS)).astype(np.float32) * 0.02 + 1e-3
        m = -(rng.random((n, BLOCKS)).astype(np.float32) * 0.1)
        d[1, 2] = 0  # a block of one value: its values equal, as Q4_K writes a zero scale for them
        q[1, 2] = 7
        if constant_block and i == 0:
            d[0, 1] = 0  # a zero scale over different values: every weight of the block is m
        outputs.append(q4_k_branch(x, sums, q, d, m))
    return ov.Model(outputs, [x], "q4_k_branches")


def run(model: ov.Model, x: np.ndarray) -> list[np.ndarray]:
    compiled = ov.Core().compile_model(model, "CPU", F32)
    result = compiled(x)
    return [np.asarray(result[out]) for out in compiled.outputs]


def ops_named(model: ov.Model, part: str) -> int:
    return sum(part in op.get_friendly_name() for op in model.get_ops())


def test_q4_k_branches_fuse_into_the_zero_point_form() -> None:
    """(Not the engine's default: ``gguf_fuse.KINDS`` is Q4_1 only, Q4_K measured even on the 1.5B.)"""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, TOKENS, K)).astype(np.float32)
    model = model_of((96, 64, 64), rng, constant_block=False)
    want = run(model, x)
    assert fuse(model_of((96, 64, 64), np.random.default_rng(7), constant_block=False), zp=True) == 0  # KINDS
    assert [len(g) for g in groups(model)] == [3]
    assert all(b.kind == "f32" for b in groups(model)[0])
    assert fuse(model, zp=True, kinds=("f16", "f32")) == 1
    assert ops_named(model, "/zp3") == 1
    assert ops_named(model, "ReduceSum") == 0  # S(x) no longer read
    got = run(model, x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_a_zero_scale_over_different_values_keeps_the_minimums() -> None:
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, TOKENS, K)).astype(np.float32)
    model = model_of((64, 64), rng, constant_block=True)
    want = run(model, x)
    assert fuse(model, zp=True, kinds=("f16", "f32")) == 1
    assert ops_named(model, "/exact_minimum2") == 1
    assert ops_named(model, "/zp") == 0
    got = run(model, x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
