"""GGUF re-encoding (genmesh.engine.core.gguf_reencode) on small files written here: values, metadata, cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter, LlamaFileType, quants

from genmesh.engine.core.gguf_reencode import misread, plan, prepare, reencode
from support.servers import DEFAULT_MODEL


def write_gguf(path: Path, kinds: dict[str, GGMLQuantizationType], seed: int = 0) -> dict[str, np.ndarray]:
    """A llama-flavoured GGUF with one 64x64 matrix per kind and one 1-D norm; returns the values."""
    rng = np.random.default_rng(seed)
    writer = GGUFWriter(str(path), "llama")
    writer.add_string("general.name", "tiny")
    writer.add_file_type(int(LlamaFileType.MOSTLY_Q4_1))
    writer.add_uint32("llama.block_count", 1)
    values: dict[str, np.ndarray] = {}
    for name, kind in kinds.items():
        x = rng.standard_normal((64, 64)).astype(np.float32) * 0.05 + 0.01
        data = quants.quantize(x, kind)
        writer.add_tensor(name, data, raw_dtype=kind)
        values[name] = quants.dequantize(data, kind).astype(np.float32)
    norm = np.ones(64, dtype=np.float32)
    writer.add_tensor("blk.0.attn_norm.weight", norm)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return values


def tensor(reader: GGUFReader, name: str) -> tuple[str, np.ndarray]:
    t = next(t for t in reader.tensors if t.name == name)
    return GGMLQuantizationType(t.tensor_type).name, quants.dequantize(t.data, t.tensor_type).astype(np.float32)


def test_the_default_model_is_misread_and_its_plan_is_f16(tmp_path: Path) -> None:
    if not DEFAULT_MODEL.is_file():
        pytest.skip("run 'make model' first")
    reader = GGUFReader(str(DEFAULT_MODEL))
    bad = misread(reader)
    assert len(bad) == 210
    assert {kind for _, kind in bad} == {"Q4_1"}
    targets = {(p.source_type, p.target_type) for p in plan(reader)}
    assert targets == {("Q4_1", "F16"), ("Q8_0", "F16"), ("F32", "F32")}  # norms (1-D) stay F32
    q8 = {(p.source_type, p.target_type) for p in plan(reader, "Q8_0")}
    assert q8 == {("Q4_1", "Q8_0"), ("Q8_0", "Q8_0"), ("F32", "F32")}


def test_f16_reencoding_keeps_every_value_and_the_metadata(tmp_path: Path) -> None:
    src, dst = tmp_path / "tiny.Q4_1.gguf", tmp_path / "tiny.F16.gguf"
    kinds = {"blk.0.attn_q.weight": GGMLQuantizationType.Q4_1, "token_embd.weight": GGMLQuantizationType.Q8_0}
    values = write_gguf(src, kinds)
    reencode(src, dst, "F16")
    out = GGUFReader(str(dst))
    assert misread(out) == []
    assert out.fields["general.name"].contents() == "tiny"
    assert out.fields["llama.block_count"].contents() == 1
    assert out.fields["general.file_type"].contents() == int(LlamaFileType.MOSTLY_F16)
    for name, original in values.items():
        kind, got = tensor(out, name)
        assert kind == "F16"
        # the GGUF's own values, rounded to half precision: nothing else moved
        np.testing.assert_array_equal(got, original.astype(np.float16).astype(np.float32))
    kind, norm = tensor(out, "blk.0.attn_norm.weight")
    assert kind == "F32"
    np.testing.assert_array_equal(norm, np.ones(64, dtype=np.float32))


def test_q8_0_reencoding_touches_only_the_misread_tensors(tmp_path: Path) -> None:
    src, dst = tmp_path / "tiny.gguf", tmp_path / "tiny.Q8_0.gguf"
    kinds = {"blk.0.attn_q.weight": GGMLQuantizationType.Q4_1, "token_embd.weight": GGMLQuantizationType.Q4_0}
    values = write_gguf(src, kinds, seed=1)
    reencode(src, dst, "Q8_0")
    out = GGUFReader(str(dst))
    assert out.fields["general.file_type"].contents() == int(LlamaFileType.MOSTLY_Q8_0)
    kind, q = tensor(out, "blk.0.attn_q.weight")
    assert kind == "Q8_0"
    # a requantisation: within half a Q8_0 step of each block (plus its f16 scale's rounding)
    step = np.abs(values["blk.0.attn_q.weight"]).reshape(-1, 32).max(axis=1) / 127
    assert np.all(np.abs(q - values["blk.0.attn_q.weight"]).reshape(-1, 32) <= 0.6 * step[:, None])
    kind, kept = tensor(out, "token_embd.weight")
    assert kind == "Q4_0"  # read exactly by OpenVINO: copied byte for byte
    np.testing.assert_array_equal(kept, values["token_embd.weight"])


def test_prepare_reencodes_once_and_links_faithful_files(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    misread_src = tmp_path / "a.gguf"
    write_gguf(misread_src, {"blk.0.attn_q.weight": GGMLQuantizationType.Q4_1})
    served = prepare(misread_src, cache, target="F16")
    assert served.is_file()
    assert not served.is_symlink()
    assert served.parent.parent == cache
    mtime = served.stat().st_mtime_ns
    assert prepare(misread_src, cache, target="F16") == served
    assert served.stat().st_mtime_ns == mtime  # made once
    as_is = prepare(misread_src, cache, reencode_unfaithful=False)
    assert as_is != served
    assert as_is.is_symlink()
    assert as_is.resolve() == misread_src.resolve()
    faithful_src = tmp_path / "b.gguf"
    write_gguf(faithful_src, {"blk.0.attn_q.weight": GGMLQuantizationType.Q8_0})
    linked = prepare(faithful_src, cache)
    assert linked.is_symlink()
    assert linked.resolve() == faithful_src.resolve()
    assert prepare(faithful_src, cache) == linked  # the default (exact) target: a file read as it is stays linked


def test_a_type_the_exact_form_does_not_cover_falls_back_to_f16_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = tmp_path / "q5_1.gguf"
    values = write_gguf(src, {"blk.0.ffn_up.weight": GGMLQuantizationType.Q5_1})
    with caplog.at_level("WARNING", logger="genmesh.engine.core.gguf_reencode"):
        served = prepare(src, tmp_path / "cache")  # the default target: exact
    assert served == prepare(src, tmp_path / "cache", target="F16")
    assert [r.getMessage() for r in caplog.records if "not covered by the exact" in r.getMessage()] == [
        f"{src.resolve()}: tensors of type Q5_1 are not covered by the exact compressed form; "
        "serving the F16 re-encoding"
    ]
    kind, kept = tensor(GGUFReader(str(served)), "blk.0.ffn_up.weight")
    assert kind == "F16"
    np.testing.assert_allclose(kept, values["blk.0.ffn_up.weight"], rtol=1e-3, atol=1e-4)
