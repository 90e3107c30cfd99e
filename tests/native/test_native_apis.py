"""TEI's and TGI's native APIs at every hop (engine, microservice, gateway with an API key), driven
by their real clients: ``huggingface_hub.InferenceClient`` (``feature_extraction``,
``text_generation`` plain and streamed with ``details``) and ``tei-client``; rerank with TEI's body
over plain HTTP (no client of TEI's rerank reads an embedding model's ``/info``). One session mesh
(``embeddings_mesh``: the engine serving the chat model and all-MiniLM-L6-v2) serves them all.

Vectors equal ``/v1/embeddings``' (cosine 1.000000), rerank scores ``/v1/rerank``'s, greedy
``/generate`` text greedy ``/v1/completions``'; bad input gets TEI's or TGI's 4xx and error shape."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest
import tei_client
from huggingface_hub import InferenceClient

from support.embeddings_mesh import ADMIN, Mesh
from support.polling import wait_until
from support.servers import EMBEDDING_NAME, MODEL_NAME

HOPS = ("engine", "microservice", "gateway")
TEXTS = ["The cat sat on the mat.", "Paris is the capital of France.", "Deep learning uses neural networks."]
QUERY = "Which city is the capital of France?"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def hops(embedding_engine_url: str, embeddings_mesh: Mesh) -> dict[str, tuple[str, dict[str, str]]]:
    """Each hop's URL and the headers it needs (the gateway: a key of its own)."""
    secret, _ = embeddings_mesh.key()
    auth = {"Authorization": f"Bearer {secret}"}
    return {
        "engine": (embedding_engine_url, {}),
        "microservice": (embeddings_mesh.microservice.url, {}),
        "gateway": (embeddings_mesh.gateway.url, auth),
    }


def post(hop: tuple[str, dict[str, str]], path: str, body: Any) -> httpx.Response:
    url, headers = hop
    return httpx.post(url + path, json=body, headers=headers, timeout=60)


def cosine(a: Any, b: Any) -> float:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


@pytest.fixture(scope="module")
def reference(hops: dict[str, tuple[str, dict[str, str]]]) -> dict[str, Any]:
    """What the OpenAI endpoints answer at the engine: the vectors, the scores, the greedy text."""
    engine = hops["engine"]
    vectors = post(engine, "/v1/embeddings", {"model": EMBEDDING_NAME, "input": TEXTS}).json()["data"]
    ranked = post(engine, "/v1/rerank", {"model": EMBEDDING_NAME, "query": QUERY, "documents": TEXTS}).json()
    completion = post(
        engine, "/v1/completions", {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 8, "temperature": 0}
    ).json()
    return {
        "vectors": [d["embedding"] for d in vectors],
        "scores": {r["index"]: r["relevance_score"] for r in ranked["results"]},
        "text": completion["choices"][0]["text"],
    }


@pytest.mark.parametrize("name", HOPS)
def test_feature_extraction_and_tei_client(name: str, hops: Any, reference: dict[str, Any]) -> None:
    url, headers = hops[name]
    client = InferenceClient(base_url=url, headers=headers)
    for text, expected in zip(TEXTS, reference["vectors"], strict=True):
        got = client.feature_extraction(text)
        assert got.shape == (1, len(expected))
        assert round(cosine(got[0], expected), 6) == 1.0
    tei = tei_client.HttpClient(url, headers=headers, timeout=60)
    assert tei.info().server_model_type == tei_client.ModelType.Embedding
    vectors = tei.embed(TEXTS)
    assert [round(cosine(v, e), 6) for v, e in zip(vectors, reference["vectors"], strict=True)] == [1.0] * 3
    similar = client.sentence_similarity(TEXTS[0], other_sentences=TEXTS[1:])
    expected = [cosine(reference["vectors"][0], v) for v in reference["vectors"][1:]]
    assert similar == pytest.approx(expected, abs=1e-5)
    raw = post(hops[name], "/embed", {"inputs": TEXTS[0], "normalize": False, "truncate": True})
    assert raw.status_code == 200
    assert round(cosine(raw.json()[0], reference["vectors"][0]), 6) == 1.0


@pytest.mark.parametrize("name", HOPS)
def test_tei_rerank(name: str, hops: Any, reference: dict[str, Any]) -> None:
    r = post(hops[name], "/rerank", {"query": QUERY, "texts": TEXTS, "return_text": True})
    assert r.status_code == 200, r.text
    ranks = r.json()
    assert [x["score"] for x in ranks] == sorted((x["score"] for x in ranks), reverse=True)
    assert {x["index"]: x["score"] for x in ranks} == pytest.approx(reference["scores"], abs=1e-6)
    assert all(x["text"] == TEXTS[x["index"]] for x in ranks)
    assert "text" not in post(hops[name], "/rerank", {"query": QUERY, "texts": TEXTS}).json()[0]
    # Cohere's body on the same path still answers Cohere's shape
    cohere = post(hops[name], "/rerank", {"model": EMBEDDING_NAME, "query": QUERY, "documents": TEXTS})
    assert cohere.status_code == 200
    assert "results" in cohere.json()


@pytest.mark.parametrize("name", HOPS)
def test_text_generation(name: str, hops: Any, reference: dict[str, Any]) -> None:
    url, headers = hops[name]
    client = InferenceClient(base_url=url, headers=headers)
    assert client.text_generation(PROMPT, max_new_tokens=8) == reference["text"]
    out = client.text_generation(PROMPT, max_new_tokens=8, details=True)
    assert out.generated_text == reference["text"]
    assert out.details is not None
    assert out.details.generated_tokens == len(out.details.tokens) > 0
    assert all(t.logprob is not None and t.logprob <= 0 for t in out.details.tokens)
    assert out.details.finish_reason in ("length", "eos_token")
    events = list(client.text_generation(PROMPT, max_new_tokens=8, stream=True, details=True))
    assert "".join(e.token.text for e in events) == reference["text"]
    assert events[-1].generated_text == reference["text"]
    assert events[-1].details is not None
    assert all(e.generated_text is None for e in events[:-1])
    native = post(hops[name], "/generate", {"inputs": PROMPT, "parameters": {"max_new_tokens": 8}})
    assert native.status_code == 200
    assert native.json() == {"generated_text": reference["text"]}
    full = post(
        hops[name], "/generate", {"inputs": PROMPT, "parameters": {"max_new_tokens": 8, "return_full_text": True}}
    )
    assert full.json()["generated_text"] == PROMPT + reference["text"]
    scored = post(
        hops[name],
        "/generate",
        {"inputs": PROMPT, "parameters": {"max_new_tokens": 2, "details": True, "decoder_input_details": True}},
    ).json()["details"]
    assert scored["prefill"][0]["logprob"] is None
    assert len(scored["prefill"]) > 1
    assert all(t["logprob"] <= 0 for t in scored["prefill"][1:])


@pytest.mark.parametrize("name", HOPS)
def test_info(name: str, hops: Any) -> None:
    url, headers = hops[name]
    info = httpx.get(url + "/info", headers=headers, timeout=10).json()
    assert info["model_id"] == MODEL_NAME
    assert info["max_total_tokens"] >= info["max_input_tokens"] > 0
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["max_input_length"] > 0


LONG = "word " * 2000
BAD: list[tuple[str, Any, int, str]] = [
    ("/embed", {"inputs": 5}, 422, "validation"),
    ("/embed", {"inputs": "x", "normalize": "yes"}, 422, "validation"),
    ("/embed", {"inputs": "x", "truncate": 1}, 422, "validation"),
    ("/embed", {"inputs": ""}, 400, "empty"),
    ("/embed", {"inputs": []}, 400, "empty"),
    ("/embed", {"inputs": ["x"] * 2049}, 413, "validation"),
    ("/embed", {"inputs": LONG}, 413, "validation"),
    ("/rerank", {"query": QUERY, "texts": []}, 400, "empty"),
    ("/rerank", {"query": QUERY, "texts": "one"}, 422, "validation"),
    ("/rerank", {"query": 3, "texts": ["a"]}, 422, "validation"),
    ("/rerank", {"query": QUERY, "texts": ["a"], "raw_scores": "no"}, 422, "validation"),
    ("/rerank", {"query": QUERY, "texts": ["a"] * 1001}, 413, "validation"),
    ("/rerank", {"query": QUERY, "texts": [LONG]}, 413, "validation"),
    ("/generate", {"inputs": 1}, 422, "validation"),
    ("/generate", {"inputs": ""}, 422, "validation"),
    ("/generate", {"inputs": "x", "parameters": {"max_new_tokens": "5"}}, 422, "validation"),
    ("/generate", {"inputs": "x", "parameters": {"temperature": 0}}, 422, "validation"),
    ("/generate", {"inputs": "x", "parameters": {"top_p": 1.0}}, 422, "validation"),
    ("/generate", {"inputs": "x", "parameters": {"stop": ["a", "b", "c", "d", "e"]}}, 422, "validation"),
    ("/generate", {"inputs": LONG * 5, "parameters": {"max_new_tokens": 4}}, 422, "validation"),
    ("/generate_stream", {"inputs": "x", "parameters": {"decoder_input_details": True}}, 422, "validation"),
]


@pytest.mark.parametrize("name", HOPS)
def test_bad_input_gets_the_native_4xx(name: str, hops: Any) -> None:
    for path, body, status, kind in BAD:
        r = post(hops[name], path, body)
        assert (r.status_code, r.json().get("error_type")) == (status, kind), (path, r.text)
        assert isinstance(r.json()["error"], str)
    url, headers = hops[name]
    for path in ("/embed", "/generate", "/"):
        for raw in (b'{"inputs": ', b""):
            r = httpx.post(url + path, content=raw, headers={**headers, "content-type": "application/json"})
            assert (r.status_code, r.json()["error_type"]) == (400, "validation"), (path, raw, r.text)


def aborted(engine_url: str) -> float:
    """Completions the engine ended because their client left (its finished-requests counter)."""
    text = httpx.get(engine_url + "/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("genmesh_engine_requests_total{") and 'finish_reason="cancelled"' in line
    )


@pytest.mark.parametrize("name", HOPS)
def test_a_stream_left_early_is_aborted_at_the_engine(name: str, hops: Any) -> None:
    url, headers = hops[name]
    before = aborted(hops["engine"][0])
    body = {"inputs": "1, 2, 3, 4, 5, 6, 7, 8,", "parameters": {"max_new_tokens": 4000}}
    with httpx.stream("POST", url + "/generate_stream", json=body, headers=headers, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data:")).startswith('data: {"index":1,')
    wait_until(lambda: aborted(hops["engine"][0]) > before, 30, what="the engine aborts the stream")


def test_the_gateway_meters_and_refuses_natively(embeddings_mesh: Mesh) -> None:
    """Tokens charged from TEI's and TGI's usage headers (not an estimate), and a refusal in TEI's shape."""
    secret, key_id = embeddings_mesh.key()
    gw = (embeddings_mesh.gateway.url, {"Authorization": f"Bearer {secret}"})
    embedded = post(gw, "/embed", {"inputs": TEXTS})
    generated = post(gw, "/generate", {"inputs": PROMPT, "parameters": {"max_new_tokens": 5}})
    prompt_tokens = int(embedded.headers["x-compute-tokens"]) + int(generated.headers["x-prompt-tokens"])
    usage = httpx.get(f"{embeddings_mesh.gateway.url}/admin/keys/{key_id}/usage", headers=ADMIN, timeout=5).json()
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (
        prompt_tokens,
        int(generated.headers["x-generated-tokens"]),
    )
    refused = httpx.post(embeddings_mesh.gateway.url + "/embed", json={"inputs": "x"}, timeout=5)
    assert refused.status_code == 401
    assert set(refused.json()) == {"error", "error_type"}
