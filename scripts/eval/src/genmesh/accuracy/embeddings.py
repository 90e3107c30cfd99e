"""The embedding model's fidelity over the API (part of ``make eval``; also on its own):

    python -m genmesh.accuracy.embeddings --url http://127.0.0.1:8008 [--url http://127.0.0.1:8888]

Every sentence of tests/fixtures/embeddings (100, 1 to ~400 tokens) is embedded in one request
(truncated at the model's 256 tokens, as sentence-transformers does) and compared with the numpy
reference made by scripts/embedding_reference.py: the worst cosine, and whether 10 questions rank
10 documents as the reference does."""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[5]
FIXTURES = ROOT / "tests" / "fixtures" / "embeddings"
MODEL = "all-MiniLM-L6-v2"
MIN_COSINE = 0.9999
TARGETS = {"embeddings: worst cosine to the reference": f"≥ {MIN_COSINE}", "embeddings: retrieval ranking": "equal"}


def _ranking(vectors: np.ndarray) -> list[list[int]]:
    docs, questions = vectors[:10], vectors[10:20]
    return [list(map(int, np.argsort(-(docs @ q)))) for q in questions]


def check(url: str, model: str = MODEL) -> list[tuple[str, str, bool]]:
    sentences = json.loads((FIXTURES / "sentences.json").read_text(encoding="utf-8"))
    reference = np.load(FIXTURES / "reference.npy").astype(np.float32)
    body = {"model": model, "input": sentences, "truncate_prompt_tokens": -1, "encoding_format": "base64"}
    r = httpx.post(url.rstrip("/") + "/v1/embeddings", json=body, timeout=300)
    r.raise_for_status()
    data = sorted(r.json()["data"], key=lambda d: d["index"])
    vectors = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in data])
    cos = (vectors * reference).sum(-1) / np.linalg.norm(vectors, axis=-1) / np.linalg.norm(reference, axis=-1)
    same = _ranking(vectors) == _ranking(reference)
    return [
        (
            "embeddings: worst cosine to the reference",
            f"{cos.min():.6f} over {len(sentences)}",
            cos.min() >= MIN_COSINE,
        ),
        ("embeddings: retrieval ranking", "equal" if same else "differs", same),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Embedding fidelity over the API.")
    p.add_argument("--url", action="append", required=True, help="a hop serving /v1/embeddings (repeatable)")
    p.add_argument("--model", default=MODEL)
    args = p.parse_args(argv)
    ok = True
    for url in args.url:
        print(url)
        for what, value, passed in check(url, args.model):
            ok = ok and passed
            print(f"  {'ok  ' if passed else 'MISS'} {what:44s} {value:48s} target {TARGETS[what]}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
