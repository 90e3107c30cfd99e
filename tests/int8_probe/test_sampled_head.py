"""``gather_before_head`` (genmesh.engine.core.gguf_op_head): the int8 path's output head on the sampled rows only.

OpenVINO GenAI gathers the sampled rows before the logits' MatMul itself, but not before genmesh's ops, so the IR
does it. Checked on a one-layer head through OpenVINO's CPU plugin with the extension: the gathered logits are the
full head's rows, bit for bit, in the order asked; an OpenVINO MatMul head and an IR that already has the parameter
are left alone.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from genmesh.engine.core.gguf_op_head import SAMPLED, gather_before_head
from genmesh.engine.native.q41_op import kquant_matmul
from int8_probe import q41
from int8_probe.bench_layer import q8_0_blocks

F32 = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 2}
K, N = 64, 40


def head_model(op: bool) -> ov.Model:
    """``x [tokens, 1, K] -> logits [tokens, 1, N]``: a ``Q80MatMul`` over random Q8_0 blocks, or OpenVINO's MatMul."""
    x = ops.parameter([-1, -1, K], np.float32, name="x")
    rng = np.random.default_rng(5)
    if op:
        head = kquant_matmul("Q8_0", x.output(0), q8_0_blocks(rng, N, K))
    else:
        head = ops.matmul(x, ops.constant(rng.standard_normal((N, K)).astype(np.float32)), False, True)
    head.output(0).get_tensor().set_names({"logits"})
    return ov.Model([head.output(0)], [x], "head")


def test_the_head_multiplies_only_the_sampled_rows(core: ov.Core) -> None:
    model = head_model(op=True)
    full = core.compile_model(q41.through_ir(core, head_model(op=True)), "CPU", F32)
    assert gather_before_head(model)
    assert not gather_before_head(model)  # once
    assert [p.get_friendly_name() for p in model.get_parameters()] == ["x", SAMPLED]
    gathered = core.compile_model(q41.through_ir(core, model), "CPU", F32)
    x = np.random.default_rng(6).standard_normal((7, 1, K)).astype(np.float32)  # seven tokens on the batch axis
    want = full({"x": x})[0]
    rows = np.array([6, 0, 3], dtype=np.int64)
    got = gathered({"x": x, SAMPLED: rows})[0]
    assert got.shape == (3, 1, N)
    assert np.array_equal(got, want[rows])


def test_an_openvino_matmul_head_is_left_to_the_pipeline() -> None:
    model = head_model(op=False)
    assert not gather_before_head(model)
    assert [p.get_friendly_name() for p in model.get_parameters()] == ["x"]
