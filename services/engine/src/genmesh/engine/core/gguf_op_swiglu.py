"""The int8 path's gated MLP as one node: ``Swish(Q41MatMul(x, Wg)) * Q41MatMul(x, Wu)`` -> ``Q41SwiGLU(x, Wg, Wu)``.

A llama layer's MLP is ``down(silu(gate(x)) * up(x))``. With gate and up one grouped ``Q41MatMul`` (two outputs,
gguf_op_groups.py) the CPU plugin no longer merges the SiLU into the multiply (its ``FuseEltwiseAndSimple``
refuses a child whose other input comes from the parent's parent): one ``Eltwise`` node more per layer.
``Q41SwiGLU`` computes ``silu(x Wg^T) * (x Wu^T)`` itself (``int8/q41_matmul.cpp``: each output column's gate and
up products in one task, the SiLU in f32), so the layer's gate, up, SiLU and product are one ``Reference`` node.
The products are bit for bit the ``Q41MatMul``'s; the SiLU is the op's (f32, its own ``exp``), not the plugin's,
so the result differs from the grouped IR's by float rounding (docs/int8-avx2.md, "SwiGLU in the op").

Runs on the per-matrix ops, before ``gguf_op_groups.group``: the gate/up pairs become one op each, q/k/v stay for
the grouping.
"""

from __future__ import annotations

from typing import Any

from ..native.q41_op import TYPE_NAME, q41_swiglu
from .ov_graph import input_node


def _source(node: Any, i: int) -> Any:
    return node.input(i).get_source_output()


def _key(output: Any) -> tuple[str, int]:
    return output.get_node().get_friendly_name(), output.get_index()


def _read_only_by(output: Any, node: Any) -> bool:
    targets = list(output.get_target_inputs())
    return len(targets) == 1 and targets[0].get_node().get_friendly_name() == node.get_friendly_name()


def _is_unit_swish(node: Any) -> bool:
    """``Swish(x)`` or ``Swish(x, 1)``: SiLU."""
    if node.get_type_name() != "Swish":
        return False
    if node.get_input_size() == 1:
        return True
    beta = input_node(node, 1)
    return beta.get_type_name() == "Constant" and [float(v) for v in beta.get_data().reshape(-1)] == [1.0]


def _single_op(output: Any) -> Any | None:
    """The per-matrix ``Q41MatMul`` (x, blocks) that ``output`` comes from, else None."""
    node = output.get_node()
    if node.get_type_name() != TYPE_NAME or node.get_input_size() != 2 or node.get_output_size() != 1:
        return None
    return node if input_node(node, 1).get_type_name() == "Constant" else None


def fuse_swiglu(model: Any) -> int:
    """Replace, in place, every ``Multiply(Swish(Q41MatMul(x, Wg)), Q41MatMul(x, Wu))`` (either order of the
    Multiply's inputs; each intermediate read only there; one ``x``) by ``Q41SwiGLU(x, Wg, Wu)``. Returns how
    many."""
    done = 0
    for mul in list(model.get_ordered_ops()):
        if mul.get_type_name() != "Multiply" or mul.get_input_size() != 2:
            continue
        for s in (0, 1):
            swish = _source(mul, s).get_node()
            if not _is_unit_swish(swish) or not _read_only_by(swish.output(0), mul):
                continue
            gate, up = _single_op(_source(swish, 0)), _single_op(_source(mul, 1 - s))
            if gate is None or up is None or _key(gate.output(0)) == _key(up.output(0)):
                continue
            if not (_read_only_by(gate.output(0), swish) and _read_only_by(up.output(0), mul)):
                continue
            x = _source(gate, 0)
            if _key(x) != _key(_source(up, 0)) or gate.get_output_partial_shape(0) != up.get_output_partial_shape(0):
                continue
            kernel = str(gate.get_attributes().get("kernel", "auto"))
            if kernel != str(up.get_attributes().get("kernel", "auto")):
                continue
            op = q41_swiglu(x, input_node(gate, 1).get_data(), input_node(up, 1).get_data(), kernel)
            op.set_friendly_name(f"{mul.get_friendly_name()}/q41swiglu")
            mul.output(0).replace(op.output(0))
            done += 1
            break
    model.validate_nodes_and_infer_types()
    return done
