"""The qwen2 pieces of the numpy fp32 reference (genmesh/accuracy/reference.py) on tiny made-up models.

The whole-model check against transformers' GGUF loader is ``make eval-reference-check`` (docs/accuracy.md);
these pin what it rests on: NEOX rope pairs, the q/k/v biases, qwen2's metadata keys, tied or untied output.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from genmesh.accuracy.reference import F32, DecoderConfig, NumpyDecoder

HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 8, 2, 1, 12, 11


def _config(arch: str, rope_base: float = 10000.0, rms_eps: float = 1e-6) -> DecoderConfig:
    return DecoderConfig(arch, 1, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, rope_base, rms_eps, context=64)


def _weights(seed: int = 0, tied: bool = True) -> dict[str, F32]:
    rng = np.random.default_rng(seed)
    hd = HIDDEN // HEADS
    shapes = {
        "token_embd.weight": (VOCAB, HIDDEN),
        "output_norm.weight": (HIDDEN,),
        "blk.0.attn_norm.weight": (HIDDEN,),
        "blk.0.ffn_norm.weight": (HIDDEN,),
        "blk.0.attn_q.weight": (HIDDEN, HIDDEN),
        "blk.0.attn_k.weight": (KV_HEADS * hd, HIDDEN),
        "blk.0.attn_v.weight": (KV_HEADS * hd, HIDDEN),
        "blk.0.attn_q.bias": (HIDDEN,),
        "blk.0.attn_k.bias": (KV_HEADS * hd,),
        "blk.0.attn_v.bias": (KV_HEADS * hd,),
        "blk.0.attn_output.weight": (HIDDEN, HIDDEN),
        "blk.0.ffn_gate.weight": (FFN, HIDDEN),
        "blk.0.ffn_up.weight": (FFN, HIDDEN),
        "blk.0.ffn_down.weight": (HIDDEN, FFN),
    }
    if not tied:
        shapes["output.weight"] = (VOCAB, HIDDEN)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def test_neox_rope_rotates_the_two_halves_of_a_head_and_normal_rope_adjacent_pairs() -> None:
    x = np.zeros((1, 1, 4), dtype=np.float32)
    x[..., 0] = 1.0
    pos = np.array([3], dtype=np.int64)
    theta = 3.0  # position * inv_freq[0], inv_freq[0] = 1
    neox = NumpyDecoder(_config("qwen2"), _weights())._rope(x, pos)[0, 0]
    norm = NumpyDecoder(_config("llama"), _weights())._rope(x, pos)[0, 0]
    np.testing.assert_allclose(neox, [np.cos(theta), 0, np.sin(theta), 0], atol=1e-6)
    np.testing.assert_allclose(norm, [np.cos(theta), np.sin(theta), 0, 0], atol=1e-6)


def test_neox_rope_is_normal_rope_on_rows_interleaved_as_llama_cpp_permutes_them() -> None:
    # llama.cpp's converter permutes llama's Q/K rows so that its adjacent-pair rope computes HF's
    # rotate-half rope: the NEOX rope on a head equals the normal rope on the head's halves interleaved.
    x = np.random.default_rng(1).standard_normal((2, 5, 4)).astype(np.float32)  # (heads, T, head_dim)
    pos = np.arange(7, 12, dtype=np.int64)
    interleave = np.array([0, 2, 1, 3])  # the halves (0, 1) and (2, 3) as adjacent pairs (0, 2), (1, 3)
    neox = NumpyDecoder(_config("qwen2", rope_base=1e6), _weights())._rope(x, pos)
    norm = NumpyDecoder(_config("llama", rope_base=1e6), _weights())._rope(x[..., interleave], pos)
    np.testing.assert_allclose(neox[..., interleave], norm, rtol=1e-5, atol=1e-6)


def _one_token_by_hand(w: dict[str, F32], token: int, eps: float) -> F32:
    """At one position the rope is the identity and attention returns v: x + Wo·(Wv·n(x) + bv), then the MLP."""

    def norm(v: F32, g: F32) -> F32:
        out: F32 = (v / np.sqrt(np.mean(v.astype(np.float64) ** 2) + eps)).astype(np.float32) * g
        return out

    x = w["token_embd.weight"][token]
    v = w["blk.0.attn_v.weight"] @ norm(x, w["blk.0.attn_norm.weight"]) + w["blk.0.attn_v.bias"]
    x = x + w["blk.0.attn_output.weight"] @ np.tile(v, HEADS // KV_HEADS)
    h = norm(x, w["blk.0.ffn_norm.weight"])
    gate, up = w["blk.0.ffn_gate.weight"] @ h, w["blk.0.ffn_up.weight"] @ h
    x = x + w["blk.0.ffn_down.weight"] @ (gate / (1 + np.exp(-gate)) * up)
    out: F32 = w.get("output.weight", w["token_embd.weight"]) @ norm(x, w["output_norm.weight"])
    return out


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_qwen2_adds_the_v_bias_and_uses_output_weight_when_the_file_has_one(tied: bool) -> None:
    w = _weights(tied=tied)
    model = NumpyDecoder(_config("qwen2"), w)
    np.testing.assert_allclose(model.logits([5])[0], _one_token_by_hand(w, 5, 1e-6), rtol=1e-4, atol=1e-4)


def test_q_and_k_biases_change_attention_beyond_the_first_token() -> None:
    w = _weights()
    shifted = {**w, "blk.0.attn_q.bias": w["blk.0.attn_q.bias"] + 1, "blk.0.attn_k.bias": w["blk.0.attn_k.bias"] - 2}
    qwen, qwen_shifted = NumpyDecoder(_config("qwen2"), w), NumpyDecoder(_config("qwen2"), shifted)
    np.testing.assert_allclose(qwen.logits([1])[0], qwen_shifted.logits([1])[0], rtol=1e-5, atol=1e-5)
    assert np.abs(qwen.logits([1, 2, 3])[-1] - qwen_shifted.logits([1, 2, 3])[-1]).max() > 1e-3


def test_a_qwen2_gguf_gives_its_own_metadata_and_lazy_weights_the_same_logits(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "tiny-qwen2.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(1e6)
    writer.add_layer_norm_rms_eps(1e-5)
    w = _weights(seed=2)
    for name, value in w.items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    eager = NumpyDecoder.from_gguf(path)
    assert eager.config == _config("qwen2", rope_base=1e6, rms_eps=float(np.float32(1e-5)))  # stored as f32
    assert eager.output_name == "token_embd.weight"  # tied: no output.weight in the file
    lazy = NumpyDecoder.from_gguf(path, lazy=True)
    np.testing.assert_array_equal(eager.logits([0, 4, 9]), lazy.logits([0, 4, 9]))
    np.testing.assert_array_equal(eager.logits([0, 4, 9]), NumpyDecoder(eager.config, w).logits([0, 4, 9]))
