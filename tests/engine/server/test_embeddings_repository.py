"""An embeddings servable in an OVMS model repository: ``config.json`` serving the chat model and
all-MiniLM-L6-v2 side by side, the embeddings ``graph.pbtxt`` (``EmbeddingsCalculatorOV``) and its
options (pooling, normalize_embeddings, truncate) honoured by the real engine."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from support.embeddings import REFERENCE, SENTENCES, cosines, vectors_of, write_repository
from support.servers import MODEL_NAME, Server, start_repository_engine

LONG = " ".join(["vector"] * 300)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("embeddings-repo")
    server = start_repository_engine(write_repository(root), root)
    yield server
    server.stop()


def test_one_config_serves_chat_and_embeddings(repo: Server) -> None:
    models = {m["id"] for m in httpx.get(repo.url + "/v1/models", timeout=10).json()["data"]}
    assert models == {"chat", "mean", "cls", "plain"}
    chat = httpx.post(
        repo.url + "/v3/chat/completions",
        json={"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        timeout=60,
    )
    assert chat.status_code == 200, chat.text
    for name in ("mean", "plain"):
        r = httpx.post(repo.url + "/v3/embeddings", json={"model": name, "input": SENTENCES[:20]}, timeout=60)
        assert r.status_code == 200, r.text
        assert cosines(vectors_of(r.json()), REFERENCE[:20]).min() >= 0.9999
    wrong = httpx.post(repo.url + "/v3/embeddings", json={"model": "chat", "input": "a"}, timeout=10)
    assert wrong.status_code == 400
    assert wrong.json()["error"]["param"] == "model"
    assert MODEL_NAME not in models  # served under the config's names


def test_graph_options_are_honoured(repo: Server) -> None:
    def embed(model: str, text: str | list[str]) -> np.ndarray:
        r = httpx.post(repo.url + "/v1/embeddings", json={"model": model, "input": text}, timeout=60)
        assert r.status_code == 200, r.text
        return vectors_of(r.json())

    cls = embed("cls", SENTENCES[:5])
    assert not np.allclose(np.linalg.norm(cls, axis=-1), 1.0, atol=1e-3)  # normalize_embeddings: false
    assert cosines(cls, REFERENCE[:5]).max() < 0.99  # CLS pooling is not the model's mean
    truncated = httpx.post(repo.url + "/v1/embeddings", json={"model": "mean", "input": LONG}, timeout=60)
    assert truncated.json()["usage"]["prompt_tokens"] == 256  # truncate: true
    refused = httpx.post(repo.url + "/v1/embeddings", json={"model": "plain", "input": LONG}, timeout=60)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "input"
