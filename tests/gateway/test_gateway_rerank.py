"""Rerank and score at every hop (engine, microservice, gateway), on the real engine serving an OVMS
repository: all-MiniLM-L6-v2 as a cosine scorer, and a test cross-encoder made from MiniLM's
encoder with a random classification head (``support/rerank.py``: no trained cross-encoder is
reachable here), once as a bare sentence-transformers folder and once behind a RerankCalculatorOV
graph whose short pairs (``max_position_embeddings``) make documents chunk. Scores are checked
against an independent fp64 numpy forward of the same weights (``support/rerank.py``, its results
kept in tests/fixtures/rerank); bad input gets a 4xx naming the field at the gateway."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cohere
import httpx
import numpy as np
import pytest
import yaml

from genmesh.engine.models.ovms_rerank_graph import RerankNodeOptions, render
from support.embeddings_mesh import ADMIN, Mesh
from support.gateway_helpers import launch_gateway, model_config, private_redis
from support.hostile import start_microservice
from support.polling import wait_until
from support.rerank import CHUNK_LENGTH, CROSS_DOCS, DOCUMENTS, LONG, QUERY, make_cross_encoder, reference
from support.servers import EMBEDDING_MODEL, MODEL_NAME, Server, start_repository_engine
from support.unharmed import unharmed

SCORER = "minilm"
CROSS = "cross"
CHUNKED = "cross-chunked"
MAX_DOCUMENTS = 8


@pytest.fixture(scope="module")
def rerank_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """(the engine serving the repository, the cross-encoder folder)."""
    root = tmp_path_factory.mktemp("rerank-repo")
    folder = make_cross_encoder(root / CROSS)
    (root / SCORER).symlink_to(EMBEDDING_MODEL)
    (root / CHUNKED).mkdir()
    graph = RerankNodeOptions(models_path=str(folder), max_position_embeddings=CHUNK_LENGTH, max_allowed_chunks=12)
    (root / CHUNKED / "graph.pbtxt").write_text(render(graph))
    config = root / "config.json"
    entries = [{"name": n, "base_path": n} for n in (SCORER, CROSS, CHUNKED)]
    config.write_text(json.dumps({"mediapipe_config_list": entries}))
    logs = tmp_path_factory.mktemp("rerank-logs")
    engine = start_repository_engine(config, logs, "--rerank-max-documents", str(MAX_DOCUMENTS))
    yield engine, folder
    engine.stop()


@pytest.fixture(scope="module")
def rerank_mesh(
    rerank_engine: tuple[Server, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Mesh, str, Path]]:
    """(the mesh, the engine's URL, the cross-encoder folder)."""
    engine, folder = rerank_engine
    logs = tmp_path_factory.mktemp("rerank-mesh-logs")
    redis_gen = private_redis(tmp_path_factory)
    redis_server = next(redis_gen)
    ms = start_microservice(logs, engine.url)
    up = [{"url": ms.url, "max_concurrency": 2, "health_path": "/v1/health_check"}]
    models = {
        MODEL_NAME: model_config(ms.url, upstreams=up),
        SCORER: model_config(ms.url, upstreams=up, kind="embeddings"),
        CROSS: model_config(ms.url, upstreams=up, kind="rerank"),
        CHUNKED: model_config(ms.url, upstreams=up, kind="rerank"),
    }
    (logs / "gateway.yaml").write_text(yaml.safe_dump({"models": models}))
    gw = launch_gateway(logs, logs / "gateway.yaml", redis_server.url, "--auth", "on")
    yield Mesh(gw, ms, redis_server), engine.url, folder
    gw.stop()
    ms.stop()
    next(redis_gen, None)


def _hops(mesh: Mesh, engine: str) -> dict[str, tuple[str, dict[str, str]]]:
    secret, _ = mesh.key()
    return {
        "engine": (engine, {}),
        "microservice": (mesh.microservice.url, {}),
        "gateway": (mesh.gateway.url, {"Authorization": f"Bearer {secret}"}),
    }


def _post(url: str, headers: dict[str, str], body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url, json=body, headers=headers, timeout=120)


def _by_index(reply: dict[str, Any]) -> np.ndarray:
    scores = {r["index"]: r["relevance_score"] for r in reply["results"]}
    return np.array([scores[i] for i in range(len(scores))])


def test_the_embedding_scorer_is_the_cosine_of_the_reference_vectors_at_every_hop(
    rerank_mesh: tuple[Mesh, str, Path],
) -> None:
    mesh, engine, _ = rerank_mesh
    expected = np.array(reference()["embedding"])
    order = list(np.argsort(-expected, kind="stable"))
    for hop, (url, headers) in _hops(mesh, engine).items():
        r = _post(url + "/v3/rerank", headers, {"model": SCORER, "query": QUERY, "documents": DOCUMENTS})
        assert r.status_code == 200, (hop, r.text)
        reply = r.json()
        assert reply["meta"]["scoring"] == "embedding_cosine"
        assert [x["index"] for x in reply["results"]] == order, hop
        assert np.abs(_by_index(reply) - expected).max() <= 1e-5, hop
        assert reply["results"][0]["document"]["text"] == DOCUMENTS[order[0]]
        assert reply["usage"]["prompt_tokens"] == reply["meta"]["tokens"]["input_tokens"] > 0
        # vLLM's /score, one to many: the same numbers in document order
        r = _post(url + "/score", headers, {"model": SCORER, "text_1": QUERY, "text_2": DOCUMENTS})
        assert r.status_code == 200, (hop, r.text)
        assert np.abs(np.array([d["score"] for d in r.json()["data"]]) - expected).max() <= 1e-5, hop


def test_the_cross_encoder_matches_a_numpy_forward_at_every_hop_chunked_or_not(
    rerank_mesh: tuple[Mesh, str, Path],
) -> None:
    mesh, engine, folder = rerank_mesh
    docs = CROSS_DOCS
    ref = reference()
    assert hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest() == ref["weights_sha256"]
    expected = {CROSS: np.array(ref["cross"]), CHUNKED: np.array(ref["cross_chunked"])}
    assert np.abs(expected[CROSS] - expected[CHUNKED]).max() > 1e-3  # the windows change the scores
    for hop, (url, headers) in _hops(mesh, engine).items():
        for model, want in expected.items():
            r = _post(url + "/v1/rerank", headers, {"model": model, "query": QUERY, "documents": docs, "top_n": 3})
            assert r.status_code == 200, (hop, model, r.text)
            reply = r.json()
            assert reply["meta"]["scoring"] == "cross_encoder"
            assert [x["index"] for x in reply["results"]] == list(np.argsort(-want, kind="stable"))[:3], (hop, model)
            got = {x["index"]: x["relevance_score"] for x in reply["results"]}
            assert max(abs(got[i] - want[i]) for i in got) <= 1e-4, (hop, model)
        # /score one to one, Cohere's document objects, return_documents false
        pairs = {"model": CROSS, "text_1": [QUERY, QUERY], "text_2": docs[:2]}
        r = _post(url + "/v1/score", headers, pairs)
        assert np.abs(np.array([d["score"] for d in r.json()["data"]]) - expected[CROSS][:2]).max() <= 1e-4
        body = {"model": CROSS, "query": QUERY, "documents": [{"text": d} for d in docs], "return_documents": False}
        r = _post(url + "/v1/rerank", headers, body)
        assert "document" not in r.json()["results"][0], hop


def test_the_cohere_clients_rerank_through_the_gateways_v1_and_v3_paths(rerank_mesh: tuple[Mesh, str, Path]) -> None:
    mesh, _, _ = rerank_mesh
    secret, _ = mesh.key()
    expected = int(np.argmax(reference()["embedding"]))
    for base in ("/v3/", "/v1"):
        v2 = cohere.ClientV2(base_url=mesh.gateway.url + base, api_key=secret)
        ranked = v2.rerank(model=SCORER, query=QUERY, documents=DOCUMENTS, top_n=2)
        assert [r.index for r in ranked.results][:1] == [expected]
        assert len(ranked.results) == 2
        v1 = cohere.Client(base_url=mesh.gateway.url + base, api_key=secret)
        assert v1.rerank(model=SCORER, query=QUERY, documents=DOCUMENTS, top_n=1).results[0].index == expected


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": SCORER, "query": QUERY, "documents": []}, 400, "documents"),
        ({"model": SCORER, "query": QUERY, "documents": ["a"], "top_n": 0}, 400, "top_n"),
        ({"model": SCORER, "query": QUERY, "documents": ["a"], "top_n": -2}, 400, "top_n"),
        ({"model": SCORER, "query": QUERY, "documents": ["a"] * (MAX_DOCUMENTS + 1)}, 400, "documents"),
        ({"model": SCORER, "query": QUERY, "documents": ["word " * 300]}, 400, "documents"),
        ({"model": CHUNKED, "query": QUERY, "documents": [LONG * 6]}, 400, "documents"),  # past max_allowed_chunks
        ({"model": CHUNKED, "query": "why " * 40, "documents": ["a"]}, 400, "query"),
        ({"model": MODEL_NAME, "query": QUERY, "documents": ["a"]}, 400, "model"),
        ({"model": "nope", "query": QUERY, "documents": ["a"]}, 404, "model"),
    ],
)
def test_bad_rerank_input_is_a_4xx_naming_the_field_at_the_gateway(
    rerank_mesh: tuple[Mesh, str, Path], body: dict[str, Any], status: int, param: str
) -> None:
    mesh, _, _ = rerank_mesh
    secret, _ = mesh.key()
    r = _post(mesh.gateway.url + "/v3/rerank", {"Authorization": f"Bearer {secret}"}, body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_truncation_cuts_a_long_document_instead_of_refusing_it(rerank_mesh: tuple[Mesh, str, Path]) -> None:
    mesh, _, _ = rerank_mesh
    secret, _ = mesh.key()
    body = {"model": SCORER, "query": QUERY, "documents": ["word " * 300], "max_tokens_per_doc": 64}
    r = _post(mesh.gateway.url + "/v2/rerank", {"Authorization": f"Bearer {secret}"}, body)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] < 100


def test_every_hop_serves_the_v3_aliases_and_names_each_models_kind(rerank_mesh: tuple[Mesh, str, Path]) -> None:
    mesh, engine, _ = rerank_mesh
    for hop, (url, headers) in _hops(mesh, engine).items():
        models = httpx.get(url + "/v3/models", headers=headers, timeout=30)
        assert models.status_code == 200, (hop, models.text)
        kinds = {m["id"]: m.get("kind") for m in models.json()["data"]}
        assert (kinds[SCORER], kinds[CROSS], kinds.get(MODEL_NAME, "chat")) == ("embeddings", "rerank", "chat"), hop
        r = _post(url + "/v3/embeddings", headers, {"model": SCORER, "input": "hello"})
        assert r.status_code == 200, (hop, r.text)
        assert len(r.json()["data"][0]["embedding"]) == 384
        r = _post(url + "/v3/embeddings", headers, {"model": CROSS, "input": "hello"})
        assert (r.status_code, r.json()["error"]["param"]) == (400, "model"), (hop, r.text)


def test_rerank_tokens_are_metered_and_rate_limited_per_key(rerank_mesh: tuple[Mesh, str, Path]) -> None:
    mesh, _, _ = rerank_mesh
    wait_until(lambda: int(mesh.redis.client().time()[0]) % 60 < 50, timeout_s=15, interval_s=0.2, what="a window")
    secret, key_id = mesh.key(tpm=30)
    auth = {"Authorization": f"Bearer {secret}"}
    r = _post(mesh.gateway.url + "/v3/rerank", auth, {"model": CROSS, "query": QUERY, "documents": DOCUMENTS})
    assert r.status_code == 200, r.text
    used = r.json()["usage"]["prompt_tokens"]
    assert used > 30  # one request may pass the budget; the next is refused

    def metered() -> bool:
        usage = httpx.get(f"{mesh.gateway.url}/admin/keys/{key_id}/usage", headers=ADMIN, timeout=5).json()
        return bool(usage["prompt_tokens"] == used)

    wait_until(metered, timeout_s=10, interval_s=0.1, what="the rerank's tokens on the key's usage")
    refused = _post(mesh.gateway.url + "/v1/score", auth, {"model": CROSS, "text_1": QUERY, "text_2": "a"})
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"]


def test_a_rerank_whose_pairs_can_never_fit_the_batch_queue_is_a_400_naming_documents(
    rerank_mesh: tuple[Mesh, str, Path], rerank_engine: tuple[Server, Path]
) -> None:
    """A 508-token query leaves one document token per 512-token pair: 8 documents of 1,125 tokens make
    9,000 query+chunk pairs (the issue's ~500-token query and 1,000 documents of ~80 tokens, in the 8
    documents this engine admits). That is within max_allowed_chunks (10,000) but past the batch
    queue's 8,192: a request that can never fit, the client's error, not a 503 of a busy queue. It is
    refused before any pair runs, at every hop; the engine is unharmed and a small rerank sent alongside is answered."""
    mesh, engine_url, _ = rerank_mesh
    engine, _ = rerank_engine
    body = {"model": CROSS, "query": "deep " * 508, "documents": ["model " * 1125] * MAX_DOCUMENTS}
    small = {"model": CROSS, "query": QUERY, "documents": DOCUMENTS}  # the same model, on the same batcher
    # the bound leaves room for the cross-encoder's first inferences when this test runs alone (~100 MiB)
    with unharmed(engine, 200 * 2**20, "/v1/rerank", small):
        for hop, (url, headers) in _hops(mesh, engine_url).items():
            r = _post(url + "/v1/rerank", headers, body)
            assert r.status_code == 400, (hop, r.text)
            error = r.json()["error"]
            assert error["param"] == "documents", (hop, error)
            assert "make 9000 query+chunk pairs, more than 8192" in error["message"], (hop, error)
