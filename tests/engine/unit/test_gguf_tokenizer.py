"""A GGUF's tokenizer from its metadata alone (genmesh.engine.core.gguf_tokenizer) on the default model."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from genmesh.engine.core.gguf_tokenizer import TOKENIZER_GGUF, tokenizer_source, write_metadata_only
from support.servers import DEFAULT_MODEL

TEXT = "def quicksort(xs):\n    return sorted(xs)  # café ☕ 日本 <|im_start|>"


def test_the_metadata_only_copy_has_every_field_no_tensor_and_the_same_tokenizer(tmp_path: Path) -> None:
    import openvino_genai as ov_genai

    copy = tokenizer_source(DEFAULT_MODEL, tmp_path)
    assert copy.name == TOKENIZER_GGUF
    assert copy.parent.parent == tmp_path
    original, meta = DEFAULT_MODEL.read_bytes(), copy.read_bytes()
    assert len(meta) < len(original) / 20
    magic, version, tensors, fields = struct.unpack_from("<4sIQQ", original, 0)
    assert struct.unpack_from("<4sIQQ", meta, 0) == (magic, version, 0, fields)
    assert tensors > 0
    assert original.startswith(meta[24:].rstrip(b"\0"), 24)  # the metadata's bytes, as they are
    a, b = ov_genai.Tokenizer(str(DEFAULT_MODEL)), ov_genai.Tokenizer(str(copy))
    assert a.encode(TEXT).input_ids.data.tolist() == b.encode(TEXT).input_ids.data.tolist()
    assert a.chat_template == b.chat_template
    assert a.get_eos_token_id() == b.get_eos_token_id()
    before = copy.stat().st_mtime_ns
    assert tokenizer_source(DEFAULT_MODEL, tmp_path) == copy
    assert copy.stat().st_mtime_ns == before


def test_an_ir_folder_is_its_own_tokenizer_source_and_a_bad_file_is_refused(tmp_path: Path) -> None:
    assert tokenizer_source(tmp_path, tmp_path / "cache") == tmp_path
    assert not (tmp_path / "cache").exists()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(DEFAULT_MODEL.read_bytes()[:4096])
    with pytest.raises(ValueError, match="truncated"):
        write_metadata_only(cut, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()
