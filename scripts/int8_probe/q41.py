"""The genmesh ``Q41MatMul`` custom OpenVINO operation from Python: build its extension, pack Q4_1 blocks,
put the op into an exact-form IR, and an fp64 reference of the same blocks.

The op itself (``q41_matmul.cpp``) is C++: an ``ov::op::Op`` whose ``evaluate()`` runs an int8 kernel (Q4_1
weights x Q8_1 activations, ``_mm256_maddubs_epi16``). ``Q41MatMulStandIn`` below has the same type name and
opset ("Q41MatMul", "genmesh"), so a model built with it in Python saves to an IR that the C++ extension reads.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
LIBRARY = BUILD / "libgenmesh_int8.so"
SOURCES = (HERE / "q41_matmul.cpp", HERE / "CMakeLists.txt")
QK = 32
BLOCK_BYTES = 20  # f16 d, f16 m, 16 bytes of nibbles


def build_extension() -> Path:
    """The extension's shared library, (re)built with cmake against the openvino wheel when missing or older
    than its sources (~10 s)."""
    if LIBRARY.is_file() and all(LIBRARY.stat().st_mtime >= s.stat().st_mtime for s in SOURCES):
        return LIBRARY
    cmake_dir = Path(ov.__file__).parent / "cmake"
    subprocess.run(["cmake", "-S", str(HERE), "-B", str(BUILD), f"-DOpenVINO_DIR={cmake_dir}"], check=True)
    subprocess.run(["cmake", "--build", str(BUILD), f"-j{os.cpu_count() or 1}"], check=True)
    return LIBRARY


class Q41MatMulStandIn(ov.Op):  # type: ignore[misc]
    """Builds and saves the op from Python (shape inference only; the C++ extension evaluates it)."""

    class_type_info = ov.DiscreteTypeInfo("Q41MatMul", "genmesh")

    def __init__(self, inputs: list[Any] | None = None, kernel: str = "auto") -> None:
        self._kernel = kernel
        super().__init__(self, inputs)

    def validate_and_infer_types(self) -> None:
        shape = self.get_input_partial_shape(0)
        shape[shape.rank.get_length() - 1] = self.get_input_partial_shape(1)[0]
        self.set_output_type(0, ov.Type.f32, shape)

    def clone_with_new_inputs(self, new_inputs: list[Any]) -> Q41MatMulStandIn:
        return Q41MatMulStandIn(new_inputs, self._kernel)

    def get_type_info(self) -> Any:
        return Q41MatMulStandIn.class_type_info

    def visit_attributes(self, visitor: Any) -> bool:
        visitor.on_attributes({"kernel": self._kernel})
        return True


def q41_matmul(x: Any, blocks: np.ndarray, kernel: str = "auto") -> Any:
    """A ``Q41MatMul`` node: ``x`` [..., K] f32 times the Q4_1 ``blocks`` [N, K/32*20] u8, transposed."""
    return Q41MatMulStandIn([x, ops.constant(blocks).output(0)], kernel)


def through_ir(core: ov.Core, model: ov.Model) -> ov.Model:
    """``model`` saved and read back by ``core``: its stand-in ops become the C++ extension's (``core`` must
    have the extension). The weights are mapped from the saved file, which stays readable once unlinked."""
    with tempfile.TemporaryDirectory(prefix="q41-") as tmp:
        ov.save_model(model, f"{tmp}/model.xml", compress_to_fp16=False)
        return core.read_model(f"{tmp}/model.xml")


def pack_blocks(q: np.ndarray, d: np.ndarray, m: np.ndarray) -> np.ndarray:
    """GGUF Q4_1 blocks [N, nb*20] from values ``q`` [N, nb, 32] (0..15), scales ``d`` and minimums ``m``
    [N, nb] (f16): per block f16 d, f16 m, then byte j = element j | element j+16 << 4."""
    n, nb, _ = q.shape
    out = np.empty((n, nb, BLOCK_BYTES), np.uint8)
    out[..., 0:2] = np.ascontiguousarray(d, dtype=np.float16).view(np.uint8).reshape(n, nb, 2)
    out[..., 2:4] = np.ascontiguousarray(m, dtype=np.float16).view(np.uint8).reshape(n, nb, 2)
    out[..., 4:] = (q[..., :16] & 0xF) | ((q[..., 16:] & 0xF) << 4)
    return out.reshape(n, nb * BLOCK_BYTES)


def unpack_blocks(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q [N, nb, 32] u8, d [N, nb] f16, m [N, nb] f16) of packed Q4_1 ``blocks``."""
    n = blocks.shape[0]
    b = blocks.reshape(n, -1, BLOCK_BYTES)
    d = np.ascontiguousarray(b[..., 0:2]).view(np.float16)[..., 0]
    m = np.ascontiguousarray(b[..., 2:4]).view(np.float16)[..., 0]
    q = np.concatenate([b[..., 4:] & 0xF, b[..., 4:] >> 4], axis=-1)
    return q, d, m


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
