"""``genmesh::Q41MatMul``, ``Q4KMatMul``, ``Q6KMatMul`` and ``Q80MatMul`` from Python: the nodes written into a
model, and GGUF Q4_1 blocks packed for the first (the others take a matrix's bytes as the file has them).

The op itself is C++ (``int8/q41_matmul.cpp``): ``Q41MatMul(x, blocks)``, ``x`` f32 ``[..., K]``, ``blocks``
u8 ``[N, K/32*20]`` (GGUF ``block_q4_1``: f16 ``d``, f16 ``m``, 16 bytes whose byte ``j`` holds element ``j``
in its low nibble and ``j+16`` in its high one), output f32 ``[..., N]`` = ``x W^T``; grouped
(``q41_matmul_group``), ``Q41MatMul(x, blocks_0, ..., blocks_g-1)`` with output ``i`` = ``x W_i^T``.
``Q41MatMulStandIn`` has the same type name and opset, so a model built with it saves to an IR that an ``ov.Core``
with the extension (``build.build()``) reads as the C++ op. ``Q4KMatMul(x, blocks)`` is the same with ``blocks`` u8
``[N, K/256*144]``, GGUF ``block_q4_K`` (``int8/q4k_matmul.cpp``), ``Q6KMatMul`` with ``[N, K/256*210]``,
``block_q6_K`` (``int8/q6k_matmul.cpp``), ``Q80MatMul`` with ``[N, K/32*34]``, ``block_q8_0``
(``int8/q80_matmul.cpp``). ``Q4KX8MatMul`` takes the same Q4_K weights interleaved eight columns at a time
(``pack_q4k_x8``: ``[N, K/256*148]``), the form the int8 path writes for Q4_K; ``Q6KX8MatMul`` likewise the Q6_K
weights (``pack_q6k_x8``: ``[N, K/256*210]``, the file's bytes moved). OpenVINO is imported when first used.

``Q41X8MatMul`` takes the same Q4_1 blocks interleaved eight columns at a time (``pack_q41_x8``: ``[N, K/32*20]``,
the file's bytes moved; grouped as ``Q41MatMul``), the form the int8 path writes for Q4_1 (core/gguf_op_x8.py).

``Q41SwiGLU(x, gate_blocks, up_blocks)`` (``q41_swiglu``; Q4_1 blocks as ``Q41MatMul``'s) has one output,
``silu(x Wg^T) * (x Wu^T)``: a gated MLP's gate/up, SiLU and product as one node (core/gguf_op_swiglu.py).
"""

from __future__ import annotations

from typing import Any

QK = 32
BLOCK_BYTES = 20  # f16 d, f16 m, 16 bytes of nibbles
TYPE_NAME, OPSET = "Q41MatMul", "genmesh"
SWIGLU_TYPE = "Q41SwiGLU"  # (x, gate_blocks, up_blocks) -> silu(x Wg^T) * (x Wu^T): one output
ONE_OUTPUT = frozenset({SWIGLU_TYPE})  # the ops whose blocks inputs make one output (the others: one each)
QK_K = 256  # weights per K-quant super-block
# GGUF type -> (the op's type name, bytes per super-block): block_q4_K is f16 d, f16 dmin, 12 bytes of 6-bit
# scales and minimums, 128 of nibbles; block_q6_K 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, f16 d
K_OPS = {"Q4_K": ("Q4KMatMul", 144), "Q6_K": ("Q6KMatMul", 210)}
# The ops that read a matrix's bytes as the file has them: the K-quants', and Q8_0's (block_q8_0: f16 d, 32 int8;
# activations per 32 as llama.cpp's Q8_0)
RAW_OPS = {**K_OPS, "Q8_0": ("Q80MatMul", 34)}
# Q4_K interleaved eight columns at a time (pack_q4k_x8): the op's type name and bytes per super-block and column
Q4K_X8 = ("Q4KX8MatMul", 148)
X8_GROUP, X8_BYTES = 8, 1184  # columns per group; bytes per group and super-block (8 * 148)
# Q4_1 likewise (pack_q41_x8): the same 20 bytes per block and column, moved; gguf_op_x8.py writes it over the
# Q41MatMul ops (grouped or not) of the int8 path's IR
Q41_X8 = "Q41X8MatMul"
# Q6_K likewise (pack_q6k_x8): the same 210 bytes per super-block and column, moved
Q6K_X8 = ("Q6KX8MatMul", 210)
# GGUF type -> the op the int8 path serves for its MatMuls (core/gguf_exact.py, native/selection.py): Q4_1, Q4_K and
# Q6_K as Q41X8MatMul / Q4KX8MatMul / Q6KX8MatMul (one contiguous stream per task and the eight-column products at
# every M: docs/int8-avx2.md; Q4_1 written first as Q41MatMul, grouped, then interleaved: core/gguf_op_x8.py)
OP_TYPES = {
    "Q4_1": Q41_X8,
    **{kind: name for kind, (name, _) in RAW_OPS.items()},
    "Q4_K": Q4K_X8[0],
    "Q6_K": Q6K_X8[0],
}


def pack_blocks(q: Any, d: Any, m: Any) -> Any:
    """GGUF Q4_1 blocks [N, nb*20] from values ``q`` [N, nb, 32] (0..15), scales ``d`` and minimums ``m``
    [N, nb] (f16, or exactly representable in f16): per block f16 d, f16 m, then byte j = element j |
    element j+16 << 4."""
    import numpy as np

    n, nb, _ = q.shape
    out = np.empty((n, nb, BLOCK_BYTES), np.uint8)
    out[..., 0:2] = np.ascontiguousarray(d, dtype=np.float16).view(np.uint8).reshape(n, nb, 2)
    out[..., 2:4] = np.ascontiguousarray(m, dtype=np.float16).view(np.uint8).reshape(n, nb, 2)
    out[..., 4:] = (q[..., :16] & 0xF) | ((q[..., 16:] & 0xF) << 4)
    return out.reshape(n, nb * BLOCK_BYTES)


def unpack_blocks(blocks: Any) -> tuple[Any, Any, Any]:
    """(q [N, nb, 32] u8, d [N, nb] f16, m [N, nb] f16) of packed Q4_1 ``blocks``."""
    import numpy as np

    n = blocks.shape[0]
    b = blocks.reshape(n, -1, BLOCK_BYTES)
    d = np.ascontiguousarray(b[..., 0:2]).view(np.float16)[..., 0]
    m = np.ascontiguousarray(b[..., 2:4]).view(np.float16)[..., 0]
    q = np.concatenate([b[..., 4:] & 0xF, b[..., 4:] >> 4], axis=-1)
    return q, d, m


def pack_q41_x8(blocks: Any) -> Any:
    """GGUF Q4_1 ``blocks`` [N, K/32*20] (row n = output n) in ``Q41X8MatMul``'s layout, [N, K/32*20] u8 (the same
    bytes, moved): the groups of eight rows first, group g at byte ``8 g * K/32*20``, per block 160 bytes: the 16
    nibble bytes of each of the eight rows as four dwords, dword ``4 j + c`` = row c's bytes ``4 j .. 4 j + 3`` (one
    ``maddubs`` of a broadcast activation dword serves the eight columns), then the eight rows' f16 d, then their f16
    m; the last N % 8 rows as the file has them."""
    import numpy as np

    n = blocks.shape[0]
    nb = blocks.shape[1] // BLOCK_BYTES
    n8 = n // X8_GROUP * X8_GROUP
    groups = n8 // X8_GROUP
    b = np.asarray(blocks[:n8], np.uint8).reshape(groups, X8_GROUP, nb, BLOCK_BYTES)
    nibbles = b[..., 4:].reshape(groups, X8_GROUP, nb, 4, 4).transpose(0, 2, 3, 1, 4).reshape(groups, nb, 128)
    d = b[..., 0:2].transpose(0, 2, 1, 3).reshape(groups, nb, 16)
    m = b[..., 2:4].transpose(0, 2, 1, 3).reshape(groups, nb, 16)
    out = np.concatenate([nibbles, d, m], axis=-1)
    tail = np.asarray(blocks[n8:], np.uint8).reshape(-1)
    return np.concatenate([out.reshape(-1), tail]).reshape(n, nb * BLOCK_BYTES)


def pack_q4k_x8(blocks: Any) -> Any:
    """GGUF Q4_K ``blocks`` [N, K/256*144] (row n = output n) in ``Q4KX8MatMul``'s layout, [N, K/256*148] u8: per
    group of eight rows and super-block, 1,184 bytes (``int8/q4k_matmul.cpp``): the 128 nibble bytes of the eight
    rows as dwords side by side (32 bytes per dword index: row c's dword at 4c), the eight 6-bit scales as bytes
    [sub-block][row], the minimums as bytes [sub-block pair][row][2], then the eight f16 ``d`` and the eight
    ``dmin``; the last N % 8 rows as the file has them, then N % 8 * K/256 * 4 zero bytes."""
    import numpy as np

    n, row = blocks.shape
    nsb = row // K_OPS["Q4_K"][1]
    n8 = n // X8_GROUP * X8_GROUP
    b = np.asarray(blocks[:n8], np.uint8).reshape(n8 // X8_GROUP, X8_GROUP, nsb, K_OPS["Q4_K"][1])
    # [group, column, super-block, j, q, byte] -> [group, super-block, j, q, column, byte]
    nib = b[..., 16:].reshape(*b.shape[:3], 4, 8, 4).transpose(0, 2, 3, 4, 1, 5)
    s = b[..., 4:16]  # ggml's get_scale_min_k4 packing (as gguf_kquants.q4_k)
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 0xF) | ((s[..., 0:4] >> 6) << 4)], axis=-1)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], axis=-1)
    groups = n8 // X8_GROUP
    out = np.concatenate(
        [
            nib.reshape(groups, nsb, 1024),
            sc.transpose(0, 2, 3, 1).reshape(groups, nsb, 64),  # [group, super-block, sub-block, column]
            mn.reshape(groups, X8_GROUP, nsb, 4, 2).transpose(0, 2, 3, 1, 4).reshape(groups, nsb, 64),
            b[..., 0:2].transpose(0, 2, 1, 3).reshape(groups, nsb, 16),  # d [column]
            b[..., 2:4].transpose(0, 2, 1, 3).reshape(groups, nsb, 16),  # dmin [column]
        ],
        axis=-1,
    )
    tail = np.asarray(blocks[n8:], np.uint8).reshape(-1)
    pad = np.zeros((n - n8) * nsb * (Q4K_X8[1] - K_OPS["Q4_K"][1]), np.uint8)
    return np.concatenate([out.reshape(-1), tail, pad]).reshape(n, nsb * Q4K_X8[1])


def pack_q6k_x8(blocks: Any) -> Any:
    """GGUF Q6_K ``blocks`` [N, K/256*210] (row n = output n) in ``Q6KX8MatMul``'s layout, [N, K/256*210] u8: per
    group of eight rows and super-block, 1,680 bytes (``int8/q6k_matmul.cpp``): the 128 ``ql`` bytes of the eight
    rows as dwords side by side (32 bytes per dword index: row c's dword at 4c), then their 64 ``qh`` bytes likewise,
    the 16 int8 scales as bytes [sub-block pair][row][2], the eight f16 ``d``; the last N % 8 rows as the file has
    them."""
    import numpy as np

    n, row = blocks.shape
    nsb = row // K_OPS["Q6_K"][1]
    n8 = n // X8_GROUP * X8_GROUP
    groups = n8 // X8_GROUP
    b = np.asarray(blocks[:n8], np.uint8).reshape(groups, X8_GROUP, nsb, K_OPS["Q6_K"][1])
    # [group, column, super-block, dword, byte] -> [group, super-block, dword, column, byte]: ql then qh
    quads = b[..., :192].reshape(*b.shape[:3], 48, 4).transpose(0, 2, 3, 1, 4)
    out = np.concatenate(
        [
            quads.reshape(groups, nsb, 1536),
            b[..., 192:208].reshape(*b.shape[:3], 8, 2).transpose(0, 2, 3, 1, 4).reshape(groups, nsb, 128),
            b[..., 208:210].transpose(0, 2, 1, 3).reshape(groups, nsb, 16),  # d [column]
        ],
        axis=-1,
    )
    tail = np.asarray(blocks[n8:], np.uint8).reshape(-1)
    return np.concatenate([out.reshape(-1), tail]).reshape(n, nsb * Q6K_X8[1])


# GGUF type -> (its interleaved op's type name, the packer of the file's blocks into that op's layout)
X8_OPS: dict[str, tuple[str, Any]] = {"Q4_K": (Q4K_X8[0], pack_q4k_x8), "Q6_K": (Q6K_X8[0], pack_q6k_x8)}

_STAND_INS: dict[str, Any] = {}


def stand_in_class(type_name: str = TYPE_NAME) -> Any:
    """The Python op class of ``type_name`` (made once: ``ov.Op`` needs OpenVINO imported)."""
    if type_name in _STAND_INS:
        return _STAND_INS[type_name]
    import openvino as ov

    class BlockMatMulStandIn(ov.Op):  # type: ignore[misc]
        """Builds and saves the op from Python (shape inference only; the C++ extension evaluates it)."""

        class_type_info = ov.DiscreteTypeInfo(type_name, OPSET)

        def __init__(self, inputs: list[Any] | None = None, kernel: str = "auto") -> None:
            self._kernel = kernel
            super().__init__(self, inputs)

        def validate_and_infer_types(self) -> None:
            for i in range(1, 2 if type_name in ONE_OUTPUT else self.get_input_size()):  # blocks_i -> output i - 1
                shape = self.get_input_partial_shape(0)
                shape[shape.rank.get_length() - 1] = self.get_input_partial_shape(i)[0]
                self.set_output_type(i - 1, ov.Type.f32, shape)

        def clone_with_new_inputs(self, new_inputs: list[Any]) -> Any:
            return type(self)(new_inputs, self._kernel)

        def get_type_info(self) -> Any:
            return type(self).class_type_info

        def visit_attributes(self, visitor: Any) -> bool:
            visitor.on_attributes({"kernel": self._kernel})
            return True

    BlockMatMulStandIn.__name__ = BlockMatMulStandIn.__qualname__ = f"{type_name}StandIn"
    _STAND_INS[type_name] = BlockMatMulStandIn
    return BlockMatMulStandIn


def q41_matmul(x: Any, blocks: Any, kernel: str = "auto") -> Any:
    """A ``Q41MatMul`` node: ``x`` (an f32 output ``[..., K]``) times the Q4_1 ``blocks`` [N, K/32*20] u8,
    transposed. ``kernel``: "auto" (AVX2 where the CPU has AVX2, FMA and F16C, else scalar), "avx2", "scalar"."""
    import openvino.opset13 as ops

    return stand_in_class()([x, ops.constant(blocks).output(0)], kernel)


def q41_x8_matmul(x: Any, packed: list[Any], kernel: str = "auto") -> Any:
    """A ``Q41X8MatMul`` node (an output per matrix): ``x`` times each of ``packed`` (Q4_1 blocks packed by
    ``pack_q41_x8``), transposed; the products are ``q41_matmul_group``'s of the same blocks, bit for bit."""
    import openvino.opset13 as ops

    return stand_in_class(Q41_X8)([x, *(ops.constant(p).output(0) for p in packed)], kernel)


def q41_matmul_group(x: Any, blocks: list[Any], kernel: str = "auto") -> Any:
    """One ``Q41MatMul`` node with an output per matrix: ``x`` times each of ``blocks`` (Q4_1, [N_i, K/32*20] u8),
    transposed; output ``i`` is ``x W_i^T``. The matrices that read one input (a layer's q/k/v, its gate/up) as
    one node: the activations are quantised once and the CPU plugin runs one node instead of several."""
    import openvino.opset13 as ops

    return stand_in_class()([x, *(ops.constant(b).output(0) for b in blocks)], kernel)


def kquant_matmul(kind: str, x: Any, blocks: Any, kernel: str = "auto") -> Any:
    """A ``Q4KMatMul`` (``kind`` "Q4_K"), ``Q6KMatMul`` ("Q6_K") or ``Q80MatMul`` ("Q8_0") node: ``x`` (an f32
    output ``[..., K]``) times the GGUF ``blocks`` [N, K/256 * bytes] u8 (Q8_0: [N, K/32 * 34]; the file's bytes,
    row n = output n), transposed. ``kernel`` as ``q41_matmul``'s."""
    import openvino.opset13 as ops

    return stand_in_class(RAW_OPS[kind][0])([x, ops.constant(blocks).output(0)], kernel)


def x8_matmul(kind: str, x: Any, packed: Any, kernel: str = "auto") -> Any:
    """A ``Q4KX8MatMul`` (``kind`` "Q4_K") or ``Q6KX8MatMul`` ("Q6_K") node: ``x`` (an f32 output ``[..., K]``)
    times the blocks packed by ``X8_OPS[kind][1]`` (``pack_q4k_x8`` / ``pack_q6k_x8``), transposed. ``kernel`` as
    ``q41_matmul``'s."""
    import openvino.opset13 as ops

    return stand_in_class(X8_OPS[kind][0])([x, ops.constant(packed).output(0)], kernel)


def q41_swiglu(x: Any, gate: Any, up: Any, kernel: str = "auto") -> Any:
    """A ``Q41SwiGLU`` node: ``silu(x Wg^T) * (x Wu^T)`` for the Q4_1 blocks ``gate`` and ``up`` (both [N, K/32*20]
    u8): a gated MLP's gate/up matmuls, SiLU and product as one node (one output, [..., N])."""
    import openvino.opset13 as ops

    return stand_in_class(SWIGLU_TYPE)([x, ops.constant(gate).output(0), ops.constant(up).output(0)], kernel)
