"""Rerank fidelity, apart from the serving path: a plain numpy (fp64) BERT forward written from the
BERT paper's and Hugging Face's definitions (as scripts/embedding_reference.py), for

- the embedding scorer: the cosine of all-MiniLM-L6-v2's mean-pooled, normalised vectors;
- a test cross-encoder: the real MiniLM encoder weights plus BERT's pooler and a classification
  head with fixed random weights, written as a sentence-transformers ``CrossEncoder`` folder
  (``BertForSequenceClassification``, one label). Its reference score is
  ``sigmoid(classifier(tanh(pooler(h[CLS]))))`` of the pair as the tokenizer's own pair encoding
  makes it (``[CLS] q [SEP] d [SEP]``, types 0/1); a document longer than the pair window is cut
  in windows of ``max_length - len(q) - 3`` tokens and scores its best window (OVMS's rule).

No trained cross-encoder is reachable here: the head is random, so these scores check the
arithmetic, not ranking quality. The tests read the reference scores from FIXTURE (fp64, as JSON),
which this module writes (a few seconds; the forward is slow under load):

    PYTHONPATH=tests .venv/bin/python tests/support/rerank.py"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from genmesh.bench import cross_encoder_folder
from support.servers import EMBEDDING_MODEL

HIDDEN = 384
# The passages and questions the rerank tests send (the queries' best documents differ)
DOCUMENTS = [
    "OpenVINO is an open-source toolkit for optimizing and deploying deep learning models on Intel hardware.",
    "The Eiffel Tower was finished in 1889 and stands on the Champ de Mars in Paris.",
    "Photosynthesis turns light, water and carbon dioxide into glucose and oxygen in plant cells.",
    "A continuous batching scheduler adds new requests to a running batch at every step.",
    "Mount Everest, 8849 metres high, is the highest mountain above sea level.",
]
QUERY = "Which toolkit deploys deep learning models on Intel CPUs?"
LONG = "A continuous batching scheduler " + "keeps the accelerator busy while requests come and go. " * 6
CROSS_DOCS = [*DOCUMENTS[:3], LONG]  # the last runs as several windows of CHUNK_LENGTH-token pairs
CHUNK_LENGTH = 40
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "rerank" / "reference.json"


@functools.cache
def load_weights(path: Path) -> dict[str, np.ndarray]:
    return {k.removeprefix("bert."): v.astype(np.float64) for k, v in cross_encoder_folder.read_f32(path).items()}


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


_erf = np.vectorize(math.erf)


def hidden_states(w: dict[str, np.ndarray], ids: list[int], types: list[int], layers: int = 6) -> np.ndarray:
    heads = 12
    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    x = x + w["embeddings.token_type_embeddings.weight"][types]
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    d = HIDDEN // heads
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
        ctx = (s @ v).transpose(1, 0, 2).reshape(n, HIDDEN)
        x = _layer_norm(
            lin(ctx, "attention.output.dense") + x,
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        h = lin(x, "intermediate.dense")
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
        x = _layer_norm(lin(h, "output.dense") + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
    return x


def tokenizer(folder: Path = EMBEDDING_MODEL) -> Tokenizer:
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


def embedding_scores(query: str, docs: list[str]) -> np.ndarray:
    """The cosine of MiniLM's mean-pooled vectors of ``query`` and each document (fp64)."""
    return _embedding_scores(query, tuple(docs)).copy()


@functools.cache
def _embedding_scores(query: str, docs: tuple[str, ...]) -> np.ndarray:
    w = load_weights(EMBEDDING_MODEL / "model.safetensors")
    tok = tokenizer()
    vectors = []
    for text in [query, *docs]:
        ids = tok.encode(text).ids
        v = hidden_states(w, ids, [0] * len(ids)).mean(0)
        vectors.append(v / np.linalg.norm(v))
    return np.array([vectors[0] @ v for v in vectors[1:]])


def make_cross_encoder(folder: Path) -> Path:
    """The test cross-encoder folder (MiniLM's encoder and pooler, a random head: ``genmesh.bench``'s)."""
    return cross_encoder_folder.make_cross_encoder(EMBEDDING_MODEL, folder)


def cross_scores(folder: Path, query: str, docs: list[str], max_length: int = 512) -> np.ndarray:
    """The reference score of each document: its best window's sigmoid(logit)."""
    w = load_weights(folder / "model.safetensors")
    tok = tokenizer(folder)
    q = tok.encode(query, add_special_tokens=False).ids
    window = max_length - len(q) - 3
    cls_, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    out = []
    for doc in docs:
        d = tok.encode(doc, add_special_tokens=False).ids
        if len(d) <= window:  # the tokenizer's own pair encoding
            pair = tok.encode(query, doc)
            pairs = [(pair.ids, pair.type_ids)]
        else:  # OVMS's windows of the document's tokens
            pieces = [d[start : start + window] for start in range(0, len(d), window)]
            pairs = [([cls_, *q, sep, *p, sep], [0] * (len(q) + 2) + [1] * (len(p) + 1)) for p in pieces]
        best = -math.inf
        for ids, types in pairs:
            h = hidden_states(w, ids, types)[0]
            pooled = np.tanh(h @ w["pooler.dense.weight"].T + w["pooler.dense.bias"])
            logit = float(pooled @ w["classifier.weight"][0] + w["classifier.bias"][0])
            best = max(best, 1.0 / (1.0 + math.exp(-logit)))
        out.append(best)
    return np.array(out)


def reference() -> dict[str, Any]:
    """The fixture: ``embedding`` (QUERY vs DOCUMENTS), ``cross`` and ``cross_chunked`` (QUERY vs
    CROSS_DOCS), and ``weights_sha256``, the test cross-encoder's weights it was computed on."""
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    return data


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        folder = make_cross_encoder(Path(tmp) / "cross")
        data = {
            "weights_sha256": hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest(),
            "embedding": embedding_scores(QUERY, DOCUMENTS).tolist(),
            "cross": cross_scores(folder, QUERY, CROSS_DOCS).tolist(),
            "cross_chunked": cross_scores(folder, QUERY, CROSS_DOCS, CHUNK_LENGTH).tolist(),
        }
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {FIXTURE}")


if __name__ == "__main__":
    main()
