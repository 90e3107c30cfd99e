"""The exact compressed form of Q4_1 (genmesh.engine.core.gguf_exact), one layer at a time.

Each layer is built as OpenVINO GenAI builds a Q4_1 matrix from a GGUF (u4 values, an integer zero
point ``round(-m/d)`` wrapped to 4 bits, f16 scale: the misreading), rewritten by ``rewrite`` from
a GGUF holding the same tensor, and run by OpenVINO's CPU plugin with f32 arithmetic, against
a float64 reference of the file's own weights (``gguf``'s dequantisation, not the converter's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter, quants

from genmesh.engine.core.config import CoreConfig
from genmesh.engine.core.gguf_exact import MARKER, Q4_1, QK, NotExact, covered, rewrite, rope_order
from genmesh.engine.core.gguf_tokenizer import TOKENIZER_GGUF
from genmesh.engine.core.model_loading import prepare_model
from support.servers import DEFAULT_MODEL

F32_EXACT = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0, "INFERENCE_NUM_THREADS": 1}


def genai_layer(w: Q4_1, inputs: int) -> tuple[ov.Model, Any]:
    """``x [1, 3, in] -> MatMul(x, W^T)`` with W decompressed as OpenVINO GenAI 2026.4 builds it."""
    rows, blocks = w.d.shape
    x = ops.parameter([1, 3, inputs], np.float32, name="x")
    flat = w.q.reshape(-1)
    packed = (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)  # OpenVINO's u4: element 2k in the low nibble
    q = ov.Tensor(ov.Type.u4, ov.Shape([rows, blocks, QK]))
    np.copyto(q.data, packed.reshape(q.data.shape))
    zp_values = (np.round(-w.m.astype(np.float32) / w.d.astype(np.float32)).astype(np.int64) & 0xF).astype(np.uint8)
    zp_flat = zp_values.reshape(-1)
    zp_flat = np.concatenate([zp_flat, np.zeros(len(zp_flat) % 2, np.uint8)])
    zp = ov.Tensor(ov.Type.u4, ov.Shape([rows, blocks, 1]))
    np.copyto(zp.data, (zp_flat[0::2] | (zp_flat[1::2] << 4)).reshape(zp.data.shape))
    weight = ops.multiply(
        ops.subtract(ops.convert(ops.constant(q), "f16"), ops.convert(ops.constant(zp), "f16")),
        ops.constant(w.d[..., None]),
    )
    weight = ops.convert(ops.reshape(weight, ops.constant(np.array([rows, inputs])), False), "f32")
    return ov.Model([ops.matmul(x, weight, False, True)], [x], "layer"), x


def run(model: ov.Model, x: np.ndarray) -> np.ndarray:
    compiled = ov.Core().compile_model(model, "CPU", F32_EXACT)
    return np.asarray(compiled({"x": x})[0], dtype=np.float64)


def write_gguf(path: Path, tensors: dict[str, np.ndarray], heads: tuple[int, int] = (1, 1)) -> GGUFReader:
    """A GGUF holding these raw Q4_1 tensors (numpy byte layout) and the head counts ``rewrite`` reads."""
    writer = GGUFWriter(str(path), "llama")
    writer.add_head_count(heads[0])
    writer.add_head_count_kv(heads[1])
    for name, raw in tensors.items():
        writer.add_tensor(name, raw, raw_dtype=GGMLQuantizationType.Q4_1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return GGUFReader(str(path))


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def check_layer(reader: GGUFReader, name: str, order: Any, x: np.ndarray) -> tuple[float, float]:
    """(relative error of the misread layer, of the rewritten one) against float64."""
    t = next(t for t in reader.tensors if t.name == name)
    want_w = quants.dequantize(t.data, t.tensor_type).astype(np.float64)[order]
    want = x.astype(np.float64) @ want_w.T
    model, _ = genai_layer(Q4_1.from_raw(t.data).rows(order), x.shape[-1])
    before = relative_error(run(model, x), want)
    assert rewrite(model, reader) == 1
    return before, relative_error(run(model, x), want)


def test_a_synthetic_layer_becomes_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    values = (rng.standard_normal((48, 128)) * 0.05 + 0.02).astype(np.float32)
    values[:8] += 0.5  # blocks whose -m/d falls outside 0..15: the integer zero point wraps
    reader = write_gguf(
        tmp_path / "one.gguf", {"blk.0.ffn_up.weight": quants.quantize(values, GGMLQuantizationType.Q4_1)}
    )
    x = rng.standard_normal((1, 3, 128)).astype(np.float32)
    before, after = check_layer(reader, "blk.0.ffn_up.weight", np.arange(48), x)
    assert before > 1e-2  # the integer zero point: a different matrix
    assert after < 1e-5  # f32 arithmetic on the file's own values


def test_real_tensors_of_the_default_model_become_exact(tmp_path: Path) -> None:
    if not DEFAULT_MODEL.is_file():
        pytest.skip("run 'make model' first")
    source = GGUFReader(str(DEFAULT_MODEL))
    wanted = ("blk.0.attn_q.weight", "blk.0.ffn_down.weight")
    raw = {t.name: np.asarray(t.data) for t in source.tensors if t.name in wanted}
    reader = write_gguf(tmp_path / "q.gguf", {"blk.0.attn_q.weight": raw["blk.0.attn_q.weight"]}, heads=(9, 3))
    rng = np.random.default_rng(1)
    # attn_q: OpenVINO GenAI's rows are the GGUF's in RoPE order (9 heads of 64)
    before, after = check_layer(
        reader, "blk.0.attn_q.weight", rope_order(576, 64), rng.standard_normal((1, 3, 576)).astype(np.float32)
    )
    assert before > 1e-2, before
    assert after < 1e-5, after
    before, after = check_layer(
        write_gguf(tmp_path / "down.gguf", {"blk.0.ffn_down.weight": raw["blk.0.ffn_down.weight"]}),
        "blk.0.ffn_down.weight",
        np.arange(576),
        rng.standard_normal((1, 3, 1536)).astype(np.float32),
    )
    assert before > 1e-2, before
    assert after < 1e-5, after


def test_a_layer_whose_values_are_not_the_file_s_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    values = (rng.standard_normal((32, 64)) * 0.05).astype(np.float32)
    raw = quants.quantize(values, GGMLQuantizationType.Q4_1)
    reader = write_gguf(tmp_path / "a.gguf", {"blk.0.ffn_up.weight": raw})
    w = Q4_1.from_raw(raw)
    model, _ = genai_layer(Q4_1(w.d, w.m, (w.q + 1) & 0xF), 64)
    with pytest.raises(NotExact, match="not the file's"):
        rewrite(model, reader)


def test_coverage() -> None:
    assert covered({"a": "Q4_1", "b": "Q8_0", "c": "F16"}) == (True, [])
    assert covered({"a": "Q8_0"}) == (False, [])  # nothing to rewrite: served as it is
    assert covered({"a": "Q4_1", "b": "Q4_K", "c": "Q6_K"}) == (False, ["Q4_K", "Q6_K"])


def test_the_default_model_is_served_as_its_exact_form() -> None:
    """What the engine core loads for the default model with the default settings (``make model`` made it)."""
    if not DEFAULT_MODEL.is_file():
        pytest.skip("run 'make model' first")
    served = prepare_model(CoreConfig(str(DEFAULT_MODEL), "CPU", 1, 1, 16, True, False))
    assert served.tokenizer_gguf is not None
    assert served.tokenizer_gguf == served.path / TOKENIZER_GGUF  # the GGUF's metadata alone
    assert served.ir == served.path / "openvino_model.xml"
    assert json.loads((served.path / MARKER).read_text())["rewritten_matmuls"] == 210  # 30 layers x 7
    assert served.save_ir is False
