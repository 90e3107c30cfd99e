"""A draft model's re-quantised copy (``--draft-quantization``: core/gguf_copy.requantised_copy, core/draft_model
.requantised) on small files written here: which tensors change type, their values, the metadata, the cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, quants
from test_gguf_reencode import tensor, write_gguf

from genmesh.engine.core.draft_model import requantised
from genmesh.engine.core.gguf_copy import requantised_copy

Q = GGMLQuantizationType
KINDS = {
    "token_embd.weight": Q.Q5_0,
    "blk.0.attn_q.weight": Q.Q8_0,
    "blk.0.ffn_up.weight": Q.Q5_0,
    "blk.0.ffn_down.weight": Q.Q4_1,
}


def test_every_matrix_but_the_embedding_becomes_q4_1(tmp_path: Path) -> None:
    src, dst = tmp_path / "draft.gguf", tmp_path / "draft.Q4_1.gguf"
    values = write_gguf(src, KINDS)
    assert requantised_copy(src, dst, "Q4_1") == 2  # attn_q and ffn_up; ffn_down is Q4_1 already
    out = GGUFReader(str(dst))
    kinds = {t.name: Q(t.tensor_type).name for t in out.tensors}
    assert kinds == {
        "token_embd.weight": "Q8_0",  # a lookup, kept: its exact Q8_0 copy (OpenVINO GenAI refuses Q5_0)
        "blk.0.attn_q.weight": "Q4_1",
        "blk.0.ffn_up.weight": "Q4_1",
        "blk.0.ffn_down.weight": "Q4_1",
        "blk.0.attn_norm.weight": "F32",
    }
    src_reader = GGUFReader(str(src))
    for name, original in values.items():
        _kind, got = tensor(out, name)
        if name in ("token_embd.weight", "blk.0.ffn_down.weight"):
            np.testing.assert_array_equal(got, original)  # the same values, and Q4_1 copied byte for byte
            continue
        expected = quants.dequantize(quants.quantize(original, Q.Q4_1), Q.Q4_1)
        np.testing.assert_array_equal(got, expected)  # the gguf package's Q4_1 of the file's exact values
        blocks = original.reshape(-1, 32)
        step = (blocks.max(axis=1) - blocks.min(axis=1)) / 15  # Q4_1's scale, per block of 32
        err = np.abs(got.reshape(-1, 32) - blocks).max(axis=1)
        # half a step, and the rounding of the f16 scale and minimum (0.503 seen)
        assert np.all(err <= step * 0.52), float((err / step).max())
    assert {f.name for f in out.fields.values()} == {f.name for f in src_reader.fields.values()}
    assert str(out.fields["general.name"].contents()) == "tiny"


def test_the_copy_is_made_once_in_the_cache(tmp_path: Path) -> None:
    src = tmp_path / "draft.gguf"
    write_gguf(src, KINDS)
    cache = tmp_path / "cache"
    first = requantised(src, str(cache), "Q4_1")
    assert first.is_file()
    assert first.parent.parent == cache
    made = first.stat().st_mtime_ns
    again = requantised(src, str(cache), "Q4_1")
    assert again == first
    assert again.stat().st_mtime_ns == made
    assert not list(first.parent.glob(".*.tmp"))


def test_an_unknown_target_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "draft.gguf"
    write_gguf(src, KINDS)
    with pytest.raises(ValueError, match="Q4_1"):
        requantised_copy(src, tmp_path / "out.gguf", "Q2_K")
