"""The int8 path's Q4_1 ops over the blocks interleaved eight columns at a time: ``Q41MatMul`` -> ``Q41X8MatMul``.

``Q41MatMul`` reads the file's blocks, a weight row per output column; its AVX2 kernel takes eight columns at a time
and so transposes each block of eight rows in registers at decode (``gather_block``: some twenty shuffles a block,
on the one shuffle port of an Intel core) and repacks them into a scratch per task at M > 4. ``Q41X8MatMul`` reads
them already in that order (``q41_op.pack_q41_x8``: the same bytes, moved), so the kernel loads a group's block as
it lies: SmolLM2's layers 1.23-1.43x faster at M = 1 and 1.25-1.37x at M = 8 on an Intel core, SmolLM2's decode
1.10x at one stream (docs/int8-avx2.md, "Q4_1 interleaved in the IR"). Each product is the same arithmetic tile for
tile, so the outputs are ``Q41MatMul``'s bit for bit (tests/int8_probe/test_q41_matmul.py).

Runs last, on the ops ``gguf_op_groups.group`` left (grouped or not); ``Q41SwiGLU`` keeps the file's layout.
"""

from __future__ import annotations

from typing import Any

from ..native.q41_op import TYPE_NAME, pack_q41_x8, q41_x8_matmul
from .ov_graph import input_node


def interleave(model: Any) -> int:
    """Replace, in place, every ``Q41MatMul`` whose blocks are constants by a ``Q41X8MatMul`` over the same blocks
    interleaved (``pack_q41_x8``), with its kernel and an output per matrix as before. Returns how many."""
    import numpy as np

    done = 0
    for node in list(model.get_ordered_ops()):
        if node.get_type_name() != TYPE_NAME:
            continue
        inputs = [input_node(node, i) for i in range(1, node.get_input_size())]
        if any(b.get_type_name() != "Constant" for b in inputs):
            continue
        packed = [pack_q41_x8(np.asarray(b.get_data())) for b in inputs]
        kernel = str(node.get_attributes().get("kernel", "auto"))
        op = q41_x8_matmul(node.input(0).get_source_output(), packed, kernel)
        op.set_friendly_name(f"{node.get_friendly_name()}/x8")
        for i in range(node.get_output_size()):
            node.output(i).replace(op.output(i))
        done += 1
    model.validate_nodes_and_infer_types()
    return done
