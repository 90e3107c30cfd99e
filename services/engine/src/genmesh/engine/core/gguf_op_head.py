"""The int8 path's output head on the sampled tokens only: ``Gather(hidden, sampled_tokens_indices)`` before it.

OpenVINO GenAI's continuous-batching pipeline inserts this gather itself (``apply_gather_before_matmul_transformation``:
a ``sampled_tokens_indices`` parameter, filled per step by its model runner with the rows it samples from), but only
where the logits come from an ``ov::op::v0::MatMul``. In the int8 path's IR they come from one of genmesh's ops
(SmolLM2's tied Q8_0 head is a ``Q80MatMul``, the Qwen 1.5B's Q6_K head a ``Q6KX8MatMul``), so the pipeline found no
MatMul and the head multiplied every prompt token of a prefill: 49,152 x 576 multiply-adds a token on SmolLM2 (a
quarter of its layers'), 151,936 x 1,536 on the 1.5B (a sixth). This writes the same gather into the IR, on the
axis the pipeline uses for paged-attention models (0: its transformation moves every token to the batch axis), so
the runner fills the parameter as it does for its own gather. The sampled rows' logits are the same numbers.
"""

from __future__ import annotations

from typing import Any

from ..native.q41_op import OP_TYPES, TYPE_NAME

# the parameter OpenVINO GenAI's model runner fills when a model has it (model_runner.hpp: the flat token rows whose
# logits it samples from, this step)
SAMPLED = "sampled_tokens_indices"
LOGITS = "logits"
HEAD_OPS = frozenset({*OP_TYPES.values(), TYPE_NAME})  # every block type's op, and the file-layout Q4_1 op


def gather_before_head(model: Any) -> bool:
    """Insert, in place, ``Gather(x, sampled_tokens_indices, axis 0)`` before the op that makes the ``logits``
    result (one of genmesh's ops with one output over a rank-3 input), and the parameter. Returns whether it did:
    not where the head is OpenVINO's MatMul (the pipeline gathers there itself) or the model has the parameter."""
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops

    if any(SAMPLED in p.output(0).get_names() for p in model.get_parameters()):
        return False
    for result in model.get_results():
        source = result.input(0).get_source_output()
        if LOGITS not in source.get_names() | result.output(0).get_names():
            continue
        head = source.get_node()
        if head.get_type_name() not in HEAD_OPS or head.get_output_size() != 1:
            return False
        x = head.input(0).get_source_output()
        if x.get_partial_shape().rank.is_dynamic or x.get_partial_shape().rank.get_length() != 3:
            return False
        rows = ops.parameter(ov.PartialShape([-1]), ov.Type.i64, name=SAMPLED)
        rows.output(0).get_tensor().set_names({SAMPLED})
        gathered = ops.gather(x, rows, ops.constant(np.array([0], dtype=np.int64)))
        gathered.set_friendly_name(f"{head.get_friendly_name()}/sampled")
        head.input(0).replace_source_output(gathered.output(0))
        model.add_parameters([rows])
        model.validate_nodes_and_infer_types()
        return True
    return False
