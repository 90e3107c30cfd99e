"""The embedding fidelity fixture (tests/fixtures/embeddings, made by scripts/embedding_reference.py)
and the checks every hop's tests share."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np

from genmesh.engine.models.ovms_embeddings_graph import EmbeddingsNodeOptions, render
from support.servers import DEFAULT_MODEL, EMBEDDING_MODEL

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "embeddings"
SENTENCES: list[str] = json.loads((FIXTURES / "sentences.json").read_text(encoding="utf-8"))
REFERENCE = np.load(FIXTURES / "reference.npy").astype(np.float32)
DOCS = range(0, 10)  # sentences[0:10] are documents, sentences[10:20] a question about each, in order
QUESTIONS = range(10, 20)
MIN_COSINE = 0.9999


def cosines(vectors: np.ndarray, reference: np.ndarray) -> np.ndarray:
    dot = (vectors * reference).sum(-1)
    return dot / np.linalg.norm(vectors, axis=-1) / np.linalg.norm(reference, axis=-1)


def vectors_of(body: dict[str, Any]) -> np.ndarray:
    """The reply's vectors in input order (float lists or base64 float32)."""
    data = sorted(body["data"], key=lambda d: d["index"])
    rows = [
        np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4")
        if isinstance(d["embedding"], str)
        else np.array(d["embedding"], dtype=np.float32)
        for d in data
    ]
    return np.stack(rows)


def ranking(vectors: np.ndarray) -> list[list[int]]:
    """For each question, the documents from most to least similar."""
    docs, questions = vectors[list(DOCS)], vectors[list(QUESTIONS)]
    return [list(map(int, np.argsort(-(docs @ q)))) for q in questions]


def check_fidelity(vectors: np.ndarray) -> None:
    """Every served vector within MIN_COSINE of the reference; the retrieval ranking unchanged."""
    assert vectors.shape == REFERENCE.shape
    cos = cosines(vectors, REFERENCE)
    worst = int(np.argmin(cos))
    assert cos.min() >= MIN_COSINE, f"sentence {worst} cosine {cos[worst]:.6f}: {SENTENCES[worst][:60]!r}"
    assert np.allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-4)  # normalised, as the model's modules say
    expected = ranking(REFERENCE)
    assert [r[0] for r in expected] == list(range(len(DOCS)))  # the fixture itself: each question finds its doc
    assert ranking(vectors) == expected


def write_repository(root: Path) -> Path:
    """chat (GGUF), mean (graph: the checkpoint's pooling, truncation on), cls (graph: CLS, not
    normalised) and plain (the checkpoint folder, no graph)."""
    (root / "chat").mkdir()
    (root / "chat" / "model.gguf").symlink_to(DEFAULT_MODEL)
    (root / "plain").symlink_to(EMBEDDING_MODEL)
    graphs = {
        "mean": EmbeddingsNodeOptions(models_path=str(EMBEDDING_MODEL), pooling="MEAN", truncate=True),
        "cls": EmbeddingsNodeOptions(models_path=str(EMBEDDING_MODEL), pooling="CLS", normalize_embeddings=False),
    }
    for name, options in graphs.items():
        (root / name).mkdir()
        (root / name / "graph.pbtxt").write_text(render(options))
    entries = [{"name": n, "base_path": n} for n in ("chat", "mean", "cls", "plain")]
    config = root / "config.json"
    config.write_text(json.dumps({"mediapipe_config_list": entries}))
    return config
