#!/usr/bin/env python3
"""The reference vectors of the embedding fidelity check, computed apart from the serving path.

A plain numpy forward pass of the BERT sentence encoder (all-MiniLM-L6-v2) on the same
``model.safetensors``, written from the BERT paper's and Hugging Face's definitions (fp64
throughout): embeddings, 6 encoder layers (exact-erf GELU), mean pooling over the tokens, L2
normalisation (the checkpoint's sentence-transformers modules). Each sentence runs alone (no
padding). Tokens come from the checkpoint's ``tokenizer.json`` (Hugging Face ``tokenizers``),
truncated at 256 tokens as sentence-transformers does (``sentence_bert_config.json``).

    .venv/bin/python scripts/embedding_reference.py            # writes tests/fixtures/embeddings/reference.npy
    .venv/bin/python scripts/embedding_reference.py --check    # compares with sentence-transformers, if importable

The fixture holds float16 vectors (cosine to the fp64 vectors > 0.99999), in sentences.json's order.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from genmesh.bench.cross_encoder_folder import read_f32

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "all-MiniLM-L6-v2"
FIXTURES = ROOT / "tests" / "fixtures" / "embeddings"
MAX_TOKENS = 256


def load_weights(path: Path) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) for k, v in read_f32(path).items()}


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def encode(w: dict[str, np.ndarray], ids: list[int], layers: int = 6, heads: int = 12) -> np.ndarray:
    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    x = x + w["embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    hidden = x.shape[-1]
    d = hidden // heads
    for i in range(layers):
        p = f"encoder.layer.{i}."

        def lin(t: np.ndarray, name: str, p: str = p) -> np.ndarray:
            return t @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        q = lin(x, "attention.self.query").reshape(n, heads, d).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(n, heads, d).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(n, heads, d).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        s = s / s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(n, hidden)
        x = layer_norm(
            lin(ctx, "attention.output.dense") + x,
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        h = gelu(lin(x, "intermediate.dense"))
        x = layer_norm(lin(h, "output.dense") + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
    pooled = x.mean(0)
    return pooled / max(np.linalg.norm(pooled), 1e-12)


def token_ids(sentences: list[str]) -> list[list[int]]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(MAX_TOKENS)
    return [e.ids for e in tok.encode_batch(sentences)]


def reference(sentences: list[str]) -> np.ndarray:
    w = load_weights(MODEL / "model.safetensors")
    return np.stack([encode(w, ids) for ids in token_ids(sentences)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with sentence-transformers (needs torch)")
    args = parser.parse_args()
    sentences = json.loads((FIXTURES / "sentences.json").read_text())
    vectors = reference(sentences)
    if args.check:
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(MODEL), device="cpu").encode(sentences, normalize_embeddings=True)
        cos = (vectors * st).sum(-1)
        print(f"numpy reference vs sentence-transformers: min cosine {cos.min():.7f} over {len(sentences)}")
        return 0 if cos.min() >= 0.9999 else 1
    np.save(FIXTURES / "reference.npy", vectors.astype(np.float16))
    print(f"wrote {len(sentences)} reference vectors to {FIXTURES / 'reference.npy'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
