"""The exact compressed form (genmesh.engine.core.gguf_exact) of Q4_1, Q4_K and Q6_K, one layer at a time.

Each layer is built as OpenVINO GenAI builds such a matrix from a GGUF (u4/u8 values, an integer
zero point ``round(-min/scale)`` wrapped to 4 bits, the scale rounded to f16: the misreading),
rewritten by ``rewrite`` from a GGUF holding the same tensor, and run by OpenVINO's CPU plugin with
f32 arithmetic, against a float64 reference of the file's own weights (``gguf``'s dequantisation,
bit-exact with ggml's, not the converter's).
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
from genmesh.engine.core.gguf_exact import MARKER, NotExact, covered, rewrite, rope_order
from genmesh.engine.core.gguf_kquants import UNPACK, Blocks, q4_1, q5_0_as_q8_0
from genmesh.engine.core.gguf_tokenizer import tokenizer_source
from genmesh.engine.core.model_loading import prepare_model
from support.servers import DEFAULT_MODEL

F32_EXACT = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0, "INFERENCE_NUM_THREADS": 1}


def _packed(values: np.ndarray, kind: ov.Type, shape: tuple[int, ...]) -> ov.Tensor:
    flat = values.reshape(-1).astype(np.uint8)
    if kind == ov.Type.u4:
        flat = np.concatenate([flat, np.zeros(len(flat) % 2, np.uint8)])
        flat = flat[0::2] | (flat[1::2] << 4)  # OpenVINO's u4: element 2k in the low nibble
    out = ov.Tensor(kind, ov.Shape(list(shape)))
    np.copyto(out.data, flat.reshape(out.data.shape))
    return out


def genai_weight(w: Blocks) -> Any:
    """W [rows, in] f32, decompressed as OpenVINO GenAI 2026.4 builds it: f16 scale, zero point
    ``round(-min/scale)`` (u4, wrapped), 32 (u8, Q6_K) or 128 (u8, Q8_0)."""
    rows, groups, group = w.q.shape
    scale = w.genai_scale[..., None]
    if w.m is None:
        kind, zp = ov.Type.u8, np.full(scale.shape, 128 if w.kind == "Q8_0" else 32, np.uint8)
    else:
        bias = w.m.astype(np.float16).astype(np.float32)[..., None]  # GenAI keeps -dmin*m as f16
        kind = ov.Type.u4
        with np.errstate(divide="ignore", invalid="ignore"):  # a zero scale (sc = 0): any zero point
            zp = (np.round(-bias / scale.astype(np.float32)).astype(np.int64) & 0xF).astype(np.uint8)
    weight = ops.multiply(
        ops.subtract(
            ops.convert(ops.constant(_packed(w.q, kind, w.q.shape)), "f16"),
            ops.convert(ops.constant(_packed(zp, kind, zp.shape)), "f16"),
        ),
        ops.constant(scale),
    )
    return ops.convert(ops.reshape(weight, ops.constant(np.array([rows, groups * group])), False), "f32")


def genai_layer(w: Blocks, inputs: int, gather: bool = False) -> ov.Model:
    """``x [1, 3, in] -> MatMul(x, W^T)`` (or ``ids [1, 3] -> Gather(W, ids)``) with W as ``genai_weight``."""
    weight = genai_weight(w)
    if gather:
        ids = ops.parameter([1, 3], np.int32, name="x")
        return ov.Model([ops.gather(weight, ids, ops.constant(np.array(0, np.int32)))], [ids], "embedding")
    x = ops.parameter([1, 3, inputs], np.float32, name="x")
    return ov.Model([ops.matmul(x, weight, False, True)], [x], "layer")


def run(model: ov.Model, x: np.ndarray) -> np.ndarray:
    compiled = ov.Core().compile_model(model, "CPU", F32_EXACT)
    return np.asarray(compiled({"x": x})[0], dtype=np.float64)


def write_gguf(
    path: Path,
    tensors: dict[str, np.ndarray],
    heads: tuple[int, int] = (1, 1),
    kind: GGMLQuantizationType = GGMLQuantizationType.Q4_1,
) -> GGUFReader:
    """A GGUF holding these raw tensors (numpy byte layout) and the head counts ``rewrite`` reads."""
    writer = GGUFWriter(str(path), "llama")
    writer.add_head_count(heads[0])
    writer.add_head_count_kv(heads[1])
    for name, raw in tensors.items():
        writer.add_tensor(name, raw, raw_dtype=kind)
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
    model = genai_layer(UNPACK[GGMLQuantizationType(t.tensor_type).name](t.data).rows(order), x.shape[-1])
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
    w = q4_1(raw)
    model = genai_layer(Blocks(w.scale, w.genai_scale, (w.q + 1) & 0xF, w.m), 64)
    with pytest.raises(NotExact, match="not the file's"):
        rewrite(model, reader)


def test_coverage() -> None:
    assert covered({"a": "Q4_1", "b": "Q8_0", "c": "F16"}) == (True, [])
    assert covered({"a": "Q8_0"}) == (False, [])  # nothing to rewrite: served as it is
    assert covered({"a": "Q4_K", "b": "Q6_K", "c": "Q5_0", "d": "Q8_0"}) == (True, [])
    assert covered({"a": "Q5_0"}) == (True, [])  # served from its exact Q8_0 copy
    assert covered({"a": "Q4_1", "b": "Q5_1", "c": "Q2_K"}) == (False, ["Q2_K", "Q5_1"])


def test_the_default_model_is_served_as_its_exact_form() -> None:
    """What the engine core loads for the default model with the default settings (``make model`` made it)."""
    if not DEFAULT_MODEL.is_file():
        pytest.skip("run 'make model' first")
    config = CoreConfig(str(DEFAULT_MODEL), "CPU", 1, 1, 16, True, False)
    served = prepare_model(config)
    assert served.tokenizer_gguf is not None
    # the GGUF's metadata alone, the one copy the API process uses too
    assert served.tokenizer_gguf == tokenizer_source(DEFAULT_MODEL, config.gguf_cache_dir)
    assert served.ir == served.path / "openvino_model.xml"
    marker = json.loads((served.path / MARKER).read_text())
    assert marker["rewritten_matmuls"] == 210  # 30 layers x 7
    assert marker["fused_groups"] == 60  # q/k/v and gate/up of each layer (gguf_fuse.py)
    assert marker["minimums"] == "zero_point"  # (q - z) d: no block sums, no minimums' MatMul
    assert served.save_ir is False


def random_blocks(rng: np.random.Generator, kind: GGMLQuantizationType, rows: int, inputs: int) -> np.ndarray:
    """Raw blocks of ``kind`` from random bytes, with finite f16 super-block scales."""
    size, bytes_per = {GGMLQuantizationType.Q4_K: (256, 144), GGMLQuantizationType.Q6_K: (256, 210)}[kind]
    raw = rng.integers(0, 256, (rows, inputs // size, bytes_per), dtype=np.uint8)
    scales = (rng.standard_normal((rows, inputs // size, 2)) * 1e-3).astype(np.float16).view(np.uint8)
    if kind == GGMLQuantizationType.Q4_K:
        raw[..., 0:4] = np.abs(scales.view(np.float16)).view(np.uint8).reshape(rows, -1, 4)  # d, dmin
    else:
        raw[..., 208:210] = scales[..., 0:2]  # d (any sign: the int8 scales carry one too)
    return raw.reshape(rows, -1)


@pytest.mark.parametrize("kind", [GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K])
def test_k_quant_layers_become_exact(tmp_path: Path, kind: GGMLQuantizationType) -> None:
    """Q4_K (u4, f16(d*sc), integer zero point) and Q6_K (u8, zero point 32, f16(d*sc)) as GenAI
    builds them, rewritten with the exact f32 scales (and Q4_K's minimum term)."""
    rng = np.random.default_rng(3)
    raw = random_blocks(rng, kind, 24, 512)
    reader = write_gguf(tmp_path / "k.gguf", {"blk.0.ffn_up.weight": raw}, kind=kind)
    x = rng.standard_normal((1, 3, 512)).astype(np.float32)
    before, after = check_layer(reader, "blk.0.ffn_up.weight", np.arange(24), x)
    assert before > (1e-2 if kind == GGMLQuantizationType.Q4_K else 2e-5), before  # Q6_K: only f16 scales
    assert after < 1e-5, after


def test_a_q4_k_embedding_becomes_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    raw = random_blocks(rng, GGMLQuantizationType.Q4_K, 40, 256)
    reader = write_gguf(tmp_path / "e.gguf", {"token_embd.weight": raw}, kind=GGMLQuantizationType.Q4_K)
    want_w = quants.dequantize(reader.tensors[0].data, GGMLQuantizationType.Q4_K).astype(np.float64)
    ids = np.array([[3, 0, 39]], dtype=np.int32)
    model = genai_layer(UNPACK["Q4_K"](reader.tensors[0].data), 256, gather=True)
    assert relative_error(run(model, ids), want_w[ids]) > 1e-2
    assert rewrite(model, reader) == 1
    assert relative_error(run(model, ids), want_w[ids]) < 1e-6


def test_q5_0_is_the_q8_0_of_the_same_weights() -> None:
    rng = np.random.default_rng(5)
    raw = rng.integers(0, 256, (4, 8, 22), dtype=np.uint8)
    raw[..., 0:2] = (rng.standard_normal((4, 8, 1)) * 1e-2).astype(np.float16).view(np.uint8)
    raw = raw.reshape(4, -1)
    want = quants.dequantize(raw, GGMLQuantizationType.Q5_0)
    assert np.array_equal(quants.dequantize(q5_0_as_q8_0(raw), GGMLQuantizationType.Q8_0), want)


@pytest.mark.parametrize("kind", [GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K])
def test_k_quant_layers_become_the_int8_op(tmp_path: Path, kind: GGMLQuantizationType) -> None:
    """With the int8 path (``q41_op``), a Q4_K / Q6_K MatMul becomes ``Q4KX8MatMul`` / ``Q6KX8MatMul`` over the
    file's own blocks interleaved eight rows at a time (the rows in GenAI's RoPE order for attn_q), which the
    extension runs within int8 activations' error
    (per 256: ~1 %) of the file's weights."""
    from genmesh.engine.native.build import build

    rng = np.random.default_rng(6)
    raw = random_blocks(rng, kind, 32, 512)
    reader = write_gguf(tmp_path / "k.gguf", {"blk.0.attn_q.weight": raw}, heads=(2, 2), kind=kind)
    order = rope_order(32, 16)
    x = rng.standard_normal((1, 3, 512)).astype(np.float32)
    want = x.astype(np.float64) @ quants.dequantize(raw, kind).astype(np.float64)[order].T
    model = genai_layer(UNPACK[kind.name](reader.tensors[0].data).rows(order), 512)
    assert rewrite(model, reader, q41_op=True) == 1
    op = {"Q4_K": "Q4KX8MatMul", "Q6_K": "Q6KX8MatMul"}[kind.name]
    assert [o.get_type_name() for o in model.get_ops() if o.get_type_name().endswith("MatMul")] == [op]
    ov.save_model(model, str(tmp_path / "op.xml"), compress_to_fp16=False)
    core = ov.Core()
    core.add_extension(str(build()))
    got = np.asarray(core.compile_model(core.read_model(str(tmp_path / "op.xml")), "CPU", F32_EXACT)({"x": x})[0])
    assert relative_error(got.astype(np.float64), want) < 0.03


@pytest.mark.parametrize("kind", [GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q5_0], ids=["Q8_0", "Q5_0"])
def test_a_tied_q8_0_output_matrix_becomes_the_int8_op_and_its_embedding_stays(
    tmp_path: Path, kind: GGMLQuantizationType
) -> None:
    """SmolLM2's ``token_embd`` is Q8_0 and also its output matrix: OpenVINO GenAI builds one decompression (u8
    ``q + 128``, zero point 128, f16 ``d``; for Q5_0, that of its exact Q8_0 copy) read by the embedding's Gather
    and the logits' MatMul. With the int8 path the MatMul becomes ``Q80MatMul`` over the file's (the copy's) blocks,
    within int8 activations' error (per 32: ~0.4 %) of the file's weights; the Gather keeps GenAI's decompression,
    exact. Without it nothing changes (Q8_0 is read exactly)."""
    from genmesh.engine.core.gguf_kquants import q8_0
    from genmesh.engine.native.build import build

    rng = np.random.default_rng(8)
    raw = rng.integers(0, 256, (40, 256 // 32, 34 if kind == GGMLQuantizationType.Q8_0 else 22), dtype=np.uint8)
    raw[..., 0:2] = (rng.random((40, 256 // 32, 1)) * 1e-3 + 1e-4).astype(np.float16).view(np.uint8)
    raw = raw.reshape(40, -1)
    reader = write_gguf(tmp_path / "tied.gguf", {"token_embd.weight": raw}, kind=kind)
    want_w = quants.dequantize(raw, kind).astype(np.float64)
    as_read = q8_0(q5_0_as_q8_0(raw) if kind == GGMLQuantizationType.Q5_0 else raw)

    def tied() -> ov.Model:
        weight = genai_weight(as_read)
        ids = ops.parameter([1, 3], np.int32, name="ids")
        x = ops.parameter([1, 3, 256], np.float32, name="x")
        embedded = ops.gather(weight, ids, ops.constant(np.array(0, np.int32)))
        return ov.Model([embedded, ops.matmul(x, weight, False, True)], [ids, x], "tied")

    plain = tied()
    assert rewrite(plain, reader) == 0
    assert sorted(o.get_type_name() for o in plain.get_ops() if o.get_type_name() in ("MatMul", "Gather")) == [
        "Gather",
        "MatMul",
    ]
    model = tied()
    assert rewrite(model, reader, q41_op=True) == 1
    kinds = [o.get_type_name() for o in model.get_ops()]
    assert {k: kinds.count(k) for k in ("Q80MatMul", "Gather", "MatMul")} == {"Q80MatMul": 1, "Gather": 1, "MatMul": 0}
    ov.save_model(model, str(tmp_path / "op.xml"), compress_to_fp16=False)
    core = ov.Core()
    core.add_extension(str(build()))
    compiled = core.compile_model(core.read_model(str(tmp_path / "op.xml")), "CPU", F32_EXACT)
    ids = np.array([[3, 0, 39]], dtype=np.int32)
    x = rng.standard_normal((1, 3, 256)).astype(np.float32)
    embedded, logits = (np.asarray(v, np.float64) for v in compiled({"ids": ids, "x": x}).values())
    assert relative_error(embedded, want_w[ids]) < 1e-6
    assert relative_error(logits, x.astype(np.float64) @ want_w.T) < 0.02


def test_q4_1_matmuls_of_one_input_become_one_grouped_int8_op(tmp_path: Path) -> None:
    """With the int8 path (``q41_op``), a layer's gate and up (Q4_1, one input) become one ``Q41MatMul`` with an output
    per matrix (gguf_op_groups.py), over the blocks interleaved (``Q41X8MatMul``: gguf_op_x8.py), each within int8
    activations' error (per 32: ~0.5 %) of the file's weights; without ``interleave`` the grouped ``Q41MatMul``."""
    from genmesh.engine.native.build import build

    rng = np.random.default_rng(9)
    raws = {
        f"blk.0.ffn_{part}.weight": quants.quantize(
            (rng.standard_normal((rows, 128)) * 0.05).astype(np.float32), GGMLQuantizationType.Q4_1
        )
        for part, rows in (("gate", 40), ("up", 24))
    }
    reader = write_gguf(tmp_path / "ffn.gguf", raws)
    x = ops.parameter([1, 3, 128], np.float32, name="x")
    weights = [genai_weight(q4_1(reader.tensors[i].data)) for i in range(2)]
    model = ov.Model([ops.matmul(x, w, False, True) for w in weights], [x], "ffn")
    plain = model.clone()
    assert rewrite(model, reader, q41_op=True) == 2
    grouped = [o for o in model.get_ops() if o.get_type_name() == "Q41X8MatMul"]
    assert [(o.get_input_size(), o.get_output_size()) for o in grouped] == [(3, 2)]
    assert rewrite(plain, reader, q41_op=True, interleave=False) == 2
    grouped = [o for o in plain.get_ops() if o.get_type_name() == "Q41MatMul"]
    assert [(o.get_input_size(), o.get_output_size()) for o in grouped] == [(3, 2)]
    ov.save_model(model, str(tmp_path / "op.xml"), compress_to_fp16=False)
    core = ov.Core()
    core.add_extension(str(build()))
    xv = rng.standard_normal((1, 3, 128)).astype(np.float32)
    got = core.compile_model(core.read_model(str(tmp_path / "op.xml")), "CPU", F32_EXACT)({"x": xv})
    for i, t in enumerate(reader.tensors):
        want = xv.astype(np.float64) @ quants.dequantize(t.data, GGMLQuantizationType.Q4_1).astype(np.float64).T
        assert relative_error(np.asarray(got[i], np.float64), want) < 0.02, t.name


def test_a_gated_mlp_over_q4_1_becomes_one_swiglu_op(tmp_path: Path) -> None:
    """With the int8 path, a layer's ``Swish(gate(x)) * up(x)`` (Q4_1, one input) becomes one ``Q41SwiGLU``
    (gguf_op_swiglu.py) and nothing of gate/up's grouped op is left; its output is within int8 activations' error of
    ``silu(x Wg^T) * (x Wu^T)`` in fp64 of the file's weights. ``swiglu=False`` keeps the grouped op and the
    plugin's Swish and Multiply (the probe's baseline)."""
    from genmesh.engine.native.build import build

    rng = np.random.default_rng(13)
    raws = {
        f"blk.0.ffn_{part}.weight": quants.quantize(
            (rng.standard_normal((40, 128)) * 0.05).astype(np.float32), GGMLQuantizationType.Q4_1
        )
        for part in ("gate", "up")
    }
    reader = write_gguf(tmp_path / "ffn.gguf", raws)
    xv = rng.standard_normal((1, 3, 128)).astype(np.float32)
    w = [quants.dequantize(t.data, GGMLQuantizationType.Q4_1).astype(np.float64) for t in reader.tensors]
    g, u = (xv.astype(np.float64) @ wi.T for wi in w)
    want = g / (1.0 + np.exp(-g)) * u
    core = ov.Core()
    core.add_extension(str(build()))
    for swiglu, kinds in ((True, {"Q41SwiGLU": 1}), (False, {"Q41X8MatMul": 1, "Swish": 1, "Multiply": 1})):
        x = ops.parameter([1, 3, 128], np.float32, name="x")
        gate, up = (ops.matmul(x, genai_weight(q4_1(reader.tensors[i].data)), False, True) for i in range(2))
        model = ov.Model([ops.multiply(ops.swish(gate), up)], [x], "ffn")
        assert rewrite(model, reader, q41_op=True, swiglu=swiglu) == 2
        names = [o.get_type_name() for o in model.get_ops()]
        assert {k: names.count(k) for k in kinds} == kinds, names
        assert "Q41MatMul" not in names or not swiglu
        xml = tmp_path / f"swiglu-{swiglu}.xml"
        ov.save_model(model, str(xml), compress_to_fp16=False)
        got = core.compile_model(core.read_model(str(xml)), "CPU", F32_EXACT)({"x": xv})[0]
        assert relative_error(np.asarray(got, np.float64), want) < 0.03, swiglu
