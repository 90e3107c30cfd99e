"""The int8 path's Q4_1 ops that read one input as one node with an output per matrix (issue 56, item 3).

``gguf_exact.rewrite(..., q41_op=True)`` writes each Q4_1 MatMul as one ``genmesh::Q41MatMul(x, blocks)``, which
the CPU plugin runs through its ``Reference`` node: on SmolLM2 210 of them (7 per layer). A layer's q, k and v read
one input, as do its gate and up. ``group`` makes each such set one ``Q41MatMul(x, blocks_0, ..., blocks_g-1)``
whose output ``i`` is the ``i``-th matrix's product (120 nodes on SmolLM2, no Split): the activations are quantised
once and each column's arithmetic is the per-matrix op's, so the outputs are bit-identical
(tests/int8_probe/test_q41_matmul.py). Measured against the per-matrix op IR in docs/int8-avx2.md ("One op per
shared input").
"""

from __future__ import annotations

import collections
from typing import Any

from ..native.q41_op import TYPE_NAME, q41_matmul_group
from .ov_graph import input_node

SIZES = (2, 3)  # gate/up, q/k/v: the sets of ops of one input that the exact form writes as one (gguf_exact)


def group(model: Any, sizes: tuple[int, ...] = SIZES) -> int:
    """Replace, in place, every set of ``sizes`` ``Q41MatMul`` nodes (one blocks input each; gate/up: 2, q/k/v: 3)
    that read the same output by one grouped ``Q41MatMul`` (output ``i`` = the ``i``-th node's, in graph order).
    Returns how many groups were written."""
    by_input: dict[tuple[str, int], list[Any]] = collections.defaultdict(list)
    for op in model.get_ordered_ops():
        if op.get_type_name() == TYPE_NAME and op.get_input_size() == 2:
            x = op.input(0).get_source_output()
            by_input[(x.get_node().get_friendly_name(), x.get_index())].append(op)
    done = 0
    for nodes in by_input.values():
        if len(nodes) not in sizes:
            continue
        kernels = {str(n.get_attributes().get("kernel", "auto")) for n in nodes}
        if len(kernels) != 1:
            continue  # (never written so: the rewrite gives every op one kernel)
        x = nodes[0].input(0).get_source_output()
        blocks = [input_node(n, 1).get_data() for n in nodes]
        grouped = q41_matmul_group(x, blocks, kernels.pop())
        grouped.set_friendly_name(f"{nodes[0].get_friendly_name()}/group{len(nodes)}")
        for i, node in enumerate(nodes):
            node.output(0).replace(grouped.output(i))
        done += 1
    model.validate_nodes_and_infer_types()
    return done
