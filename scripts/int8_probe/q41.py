"""The genmesh ``Q41MatMul`` custom OpenVINO operation from Python: build its extension, pack Q4_1 blocks,
put the op into an exact-form IR, and an fp64 reference of the same blocks.

The op itself is the engine's (``genmesh/engine/native/int8/q41_matmul.cpp``), C++: an ``ov::op::Op`` whose
``evaluate()`` runs an int8 kernel (Q4_1 weights x Q8_1 activations, ``_mm256_maddubs_epi16``).
``Q41MatMulStandIn`` (genmesh.engine.native.q41_op) has the same type name and opset ("Q41MatMul", "genmesh"),
so a model built with it in Python saves to an IR that the C++ extension reads.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from genmesh.engine.native import build as native_build
from genmesh.engine.native.q41_op import (
    BLOCK_BYTES,
    QK,
    pack_blocks,
    q41_matmul,
    q41_matmul_group,
    stand_in_class,
    unpack_blocks,
)

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"  # the probe's IRs (gitignored)
Q41MatMulStandIn = stand_in_class()  # the engine's (genmesh.engine.native.q41_op), subclassed by probe.py

__all__ = ["BLOCK_BYTES", "QK", "Q41MatMulStandIn", "pack_blocks", "q41_matmul", "q41_matmul_group", "unpack_blocks"]


def build_extension() -> Path:
    """The engine's int8 extension (genmesh.engine.native.build: cached under ~/.cache/genmesh/native by
    source hash; built with cmake against the openvino wheel when missing, ~10 s)."""
    return native_build.build()


def through_ir(core: ov.Core, model: ov.Model) -> ov.Model:
    """``model`` saved and read back by ``core``: its stand-in ops become the C++ extension's (``core`` must
    have the extension). The weights are mapped from the saved file, which stays readable once unlinked."""
    with tempfile.TemporaryDirectory(prefix="q41-") as tmp:
        ov.save_model(model, f"{tmp}/model.xml", compress_to_fp16=False)
        return core.read_model(f"{tmp}/model.xml")


def reference(x: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """fp64 ``x W^T`` with ``W = d*q + m`` of the same blocks (the weights exactly, the activations as given)."""
    q, d, m = unpack_blocks(blocks)
    w = (d.astype(np.float64)[..., None] * q + m.astype(np.float64)[..., None]).reshape(q.shape[0], -1)
    return np.asarray(np.asarray(x, np.float64).reshape(-1, w.shape[1]) @ w.T, np.float64)


def quantise_q8_1(x: np.ndarray) -> np.ndarray:
    """``x`` [M, K] as the kernel sees it: per block of 32, ``dx * round(x / dx)`` with ``dx = max|x| / 127``
    (in f32, ties to even), returned in fp64."""
    xb = np.asarray(x, np.float32).reshape(x.shape[0], -1, QK)
    dx = np.abs(xb).max(axis=-1, keepdims=True) / np.float32(127)
    inv = np.where(dx != 0, np.float32(1) / np.where(dx != 0, dx, 1), np.float32(0)).astype(np.float32)
    qx = np.rint(xb * inv)
    return np.asarray((qx.astype(np.float64) * dx.astype(np.float64)).reshape(x.shape), np.float64)


# ---------------------------------------------------------------------------------------------------------------
# The exact IR's Q4_1 matmuls: Add(MatMul(x, Convert(Reshape(Multiply(Convert(u4), f16 d)))), MatMul(S(x), M))
def _src(node: Any, i: int) -> Any:
    return node.input(i).get_source_output().get_node()


def _exact_q41(add: Any) -> tuple[Any, np.ndarray] | None:
    """(x, packed blocks) of an exact-form Q4_1 matmul ``add`` (``<MatMul>/exact_minimum``), else None."""
    main, minimum = _src(add, 0), _src(add, 1)
    if main.get_type_name() != "MatMul" or minimum.get_type_name() != "MatMul":
        return None
    node = _src(main, 1)
    while node.get_type_name() in ("Convert", "Reshape"):
        node = _src(node, 0)
    if node.get_type_name() != "Multiply":
        return None
    conv, scale = _src(node, 0), _src(node, 1)
    if conv.get_type_name() != "Convert" or scale.get_type_name() != "Constant":
        return None
    weight = _src(conv, 0)
    if weight.get_type_name() != "Constant" or weight.get_output_element_type(0) != ov.Type.u4:
        return None
    m_node = _src(minimum, 1)
    if m_node.get_type_name() == "Convert":
        m_node = _src(m_node, 0)
    if m_node.get_type_name() != "Constant" or m_node.get_output_element_type(0) != ov.Type.f16:
        return None  # Q4_K: an f32 minimum (and an f32 scale); not this op's blocks
    d = np.asarray(scale.get_data())
    if d.dtype != np.float16:
        return None
    shape = tuple(weight.get_output_shape(0))  # [N, nb, 32]
    packed = np.asarray(weight.get_data(), dtype=np.uint8)
    q = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(shape)  # OpenVINO's u4: element 2k low
    m = np.asarray(m_node.get_data()).reshape(shape[0], shape[1])
    return main.input(0).get_source_output(), pack_blocks(q, d.reshape(shape[0], shape[1]), m)


def replace_matmuls(model: ov.Model, limit: int | None = None, kernel: str = "auto") -> list[str]:
    """Replace up to ``limit`` (all: None) exact-form Q4_1 matmuls of ``model`` with ``Q41MatMul`` over the
    same blocks, in place. Returns the replaced matmuls' names."""
    done: list[str] = []
    for op in model.get_ordered_ops():
        if limit is not None and len(done) >= limit:
            break
        if op.get_type_name() != "Add" or not op.get_friendly_name().endswith("/exact_minimum"):
            continue
        found = _exact_q41(op)
        if found is None:
            continue
        x, blocks = found
        new = q41_matmul(x, blocks, kernel)
        new.set_friendly_name(op.get_friendly_name().removesuffix("/exact_minimum") + "/q41")
        for consumer in list(op.output(0).get_target_inputs()):
            consumer.replace_source_output(new.output(0))
        done.append(new.get_friendly_name())
    model.validate_nodes_and_infer_types()
    return done
