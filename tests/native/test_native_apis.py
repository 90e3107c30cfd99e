"""TEI's and TGI's native APIs at every hop (engine, microservice, gateway with an API key), driven
by their real clients: ``huggingface_hub.InferenceClient`` (``feature_extraction``,
``text_generation`` plain and streamed with ``details``) and ``tei-client``; rerank with TEI's body
over plain HTTP (no client of TEI's rerank reads an embedding model's ``/info``). One session mesh
(``embeddings_mesh``: the engine serving the chat model and all-MiniLM-L6-v2) serves them all.

Vectors equal ``/v1/embeddings``' (cosine 1.000000), rerank scores ``/v1/rerank``'s, greedy
``/generate`` text greedy ``/v1/completions``'; bad input gets TEI's or TGI's 4xx and error shape."""

from __future__ import annotations

import json
import socket
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
    ("/embed", {"inputs": ["x"] * 2049}, 422, "validation"),
    ("/embed", {"inputs": LONG}, 422, "validation"),
    ("/rerank", {"query": QUERY, "texts": []}, 400, "empty"),
    ("/rerank", {"query": QUERY, "texts": "one"}, 422, "validation"),
    ("/rerank", {"query": 3, "texts": ["a"]}, 422, "validation"),
    ("/rerank", {"query": QUERY, "texts": ["a"], "raw_scores": "no"}, 422, "validation"),
    ("/rerank", {"query": QUERY, "texts": ["a"] * 1001}, 422, "validation"),
    ("/rerank", {"query": QUERY, "texts": [LONG]}, 422, "validation"),
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
    for path in ("/embed", "/generate", "/rerank", "/"):  # refused by the HTTP server before any of it is read
        status, refused = oversized(url, path, 64 * 1024 * 1024)
        assert (status, refused["error_type"]) == (413, "validation"), (path, refused)


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


def usage_of(mesh: Mesh, key_id: str) -> tuple[int, int]:
    usage = httpx.get(f"{mesh.gateway.url}/admin/keys/{key_id}/usage", headers=ADMIN, timeout=5).json()
    return usage["prompt_tokens"], usage["completion_tokens"]


def test_the_gateway_meters_natively_as_the_openai_endpoints(embeddings_mesh: Mesh) -> None:
    """TEI's /embed and /rerank are charged the tokens /v1/embeddings and /v1/rerank are for the same
    inputs (TEI's usage header, not an estimate); TGI's /generate its prompt and generated tokens."""
    native_secret, native_id = embeddings_mesh.key()
    openai_secret, openai_id = embeddings_mesh.key()
    tei = (embeddings_mesh.gateway.url, {"Authorization": f"Bearer {native_secret}"})
    oai = (embeddings_mesh.gateway.url, {"Authorization": f"Bearer {openai_secret}"})
    embedded = post(tei, "/embed", {"inputs": TEXTS})
    ranked = post(tei, "/rerank", {"query": QUERY, "texts": TEXTS})
    assert embedded.status_code == ranked.status_code == 200
    counted = int(embedded.headers["x-compute-tokens"]) + int(ranked.headers["x-compute-tokens"])
    vectors = post(oai, "/v1/embeddings", {"model": EMBEDDING_NAME, "input": TEXTS}).json()
    cohere = post(oai, "/v1/rerank", {"model": EMBEDDING_NAME, "query": QUERY, "documents": TEXTS}).json()
    reported = vectors["usage"]["prompt_tokens"] + cohere["usage"]["prompt_tokens"]
    assert counted == reported
    wait_until(lambda: usage_of(embeddings_mesh, openai_id) == (reported, 0), 10, what="the OpenAI calls charged")
    wait_until(lambda: usage_of(embeddings_mesh, native_id) == (reported, 0), 10, what="TEI's calls charged alike")
    generated = post(tei, "/generate", {"inputs": PROMPT, "parameters": {"max_new_tokens": 5}})
    prompt, completion = int(generated.headers["x-prompt-tokens"]), int(generated.headers["x-generated-tokens"])
    expected = (reported + prompt, completion)
    wait_until(lambda: usage_of(embeddings_mesh, native_id) == expected, 10, what="TGI's tokens charged")


NATIVE_CALLS: list[tuple[str, Any]] = [
    ("/embed", {"inputs": "x"}),
    ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b"]}}),
    ("/rerank", {"query": QUERY, "texts": ["a"]}),
    ("/generate", {"inputs": "x", "parameters": {"max_new_tokens": 1}}),
    ("/generate_stream", {"inputs": "x", "parameters": {"max_new_tokens": 1}}),
    ("/", {"inputs": "x"}),
    ("/predict", {"inputs": "x"}),
]


def native_refusal(r: httpx.Response, status: int, kind: str) -> None:
    assert r.status_code == status, (r.request.url, r.text)
    assert r.json() == {"error": r.json()["error"], "error_type": kind}, r.text
    assert isinstance(r.json()["error"], str)


def oversized(url: str, path: str, length: int) -> tuple[int, dict[str, Any]]:
    """A request whose Content-Length is past the server's limit, refused before its body is sent."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: {length}\r\n\r\n".encode())
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head_bytes, _, body = reply.partition(b"\r\n\r\n")
    return int(head_bytes.split(b" ", 2)[1]), json.loads(body)


def test_the_gateway_refuses_natively_on_native_paths(embeddings_mesh: Mesh) -> None:
    """The gateway's own refusals, made before anything is relayed (no key, a key past its limits, a
    body too large), are TEI's and TGI's shape on their paths, with Retry-After on a 429; on
    /v1/rerank, and for Cohere's body on /rerank once it is read, OpenAI's."""
    gw = embeddings_mesh.gateway.url
    for path, body in NATIVE_CALLS:
        native_refusal(httpx.post(gw + path, json=body, timeout=10), 401, "validation")
        status, refused = oversized(gw, path, 64 * 1024 * 1024)
        assert (status, refused["error_type"]) == (413, "validation"), (path, refused)
    native_refusal(httpx.get(gw + "/info", timeout=10), 401, "validation")
    assert httpx.post(gw + "/v1/rerank", json={"query": QUERY, "texts": ["a"]}, timeout=10).json()["error"]["message"]
    assert "message" in oversized(gw, "/v1/rerank", 64 * 1024 * 1024)[1]["error"]
    secret, _ = embeddings_mesh.key(rpm=1)
    auth = {"Authorization": f"Bearer {secret}"}
    assert httpx.post(gw + "/embed", json={"inputs": "x"}, headers=auth, timeout=30).status_code == 200
    for path, body in NATIVE_CALLS:
        r = httpx.post(gw + path, json=body, headers=auth, timeout=10)
        native_refusal(r, 429, "overloaded")
        assert int(r.headers["retry-after"]) >= 1
    secret, _ = embeddings_mesh.key()
    auth = {"Authorization": f"Bearer {secret}"}
    cohere = httpx.post(gw + "/rerank", json={"query": QUERY, "documents": "x"}, headers=auth, timeout=10)
    assert cohere.status_code == 400
    assert cohere.json()["error"]["param"] == "documents"


@pytest.mark.parametrize("name", HOPS)
def test_tei_routes_for_other_models_get_tei_s_refusal(name: str, hops: Any) -> None:
    """TEI's /embed_sparse (SPLADE), /predict (a classifier) and /embed_all (token embeddings): TEI's
    424 ``backend`` for a model that does not support them, not a 404; a body that is not JSON is
    still a 400."""
    for path in ("/embed_sparse", "/predict", "/embed_all"):
        native_refusal(post(hops[name], path, {"inputs": "x"}), 424, "backend")
        url, headers = hops[name]
        r = httpx.post(url + path, content=b"{", headers={**headers, "content-type": "application/json"}, timeout=10)
        native_refusal(r, 400, "validation")


@pytest.mark.parametrize("name", HOPS)
def test_tei_tokenize_and_decode(name: str, hops: Any) -> None:
    """TEI's /tokenize (token objects: id, text, special, byte offsets start/stop) and /decode, on the
    embedding model's tokenizer; vLLM's /tokenize body on the same path is still vLLM's at the engine."""
    text = "Café au lait in Paris."
    r = post(hops[name], "/tokenize", {"inputs": text})
    assert r.status_code == 200, r.text
    (tokens,) = r.json()
    assert set(tokens[0]) == {"id", "text", "special", "start", "stop"}
    assert (tokens[0]["special"], tokens[0]["start"], tokens[-1]["special"]) == (True, None, True)
    words = [t for t in tokens if not t["special"]]
    raw = text.encode()
    assert all(t["text"] == raw[t["start"] : t["stop"]].decode() for t in words), words  # byte offsets
    assert words[-1]["stop"] == len(raw)
    assert len(raw) > len(text)
    plain = post(hops[name], "/tokenize", {"inputs": [text, "Paris"], "add_special_tokens": False}).json()
    assert len(plain) == 2
    assert [t["id"] for t in plain[0]] == [t["id"] for t in words]
    ids = [t["id"] for t in tokens]
    decoded = post(hops[name], "/decode", {"ids": ids}).json()
    assert decoded == [post(hops[name], "/decode", {"ids": [ids, ids]}).json()[0]]
    assert decoded[0].replace(" ", "") == "cafeaulaitinparis."  # the uncased model's own normalisation
    kept = post(hops[name], "/decode", {"ids": ids, "skip_special_tokens": False}).json()[0]
    assert kept.startswith("[CLS]")
    assert kept.endswith("[SEP]")
    for path, body, status, kind in [
        ("/tokenize", {"inputs": []}, 400, "empty"),
        ("/tokenize", {"inputs": 5}, 422, "validation"),
        ("/tokenize", {"inputs": ["x"] * 2049}, 422, "validation"),
        ("/decode", {"ids": "x"}, 422, "validation"),
        ("/decode", {"ids": [10**8]}, 422, "validation"),
    ]:
        native_refusal(post(hops[name], path, body), status, kind)
    if name == "engine":
        vllm = post(hops[name], "/tokenize", {"model": MODEL_NAME, "prompt": PROMPT}).json()
        assert vllm["count"] == len(vllm["tokens"]) > 0


FILLER = "The weather report mentioned rain and wind over the hills again. " * 40
LONG_DOC = FILLER + "Paris is the capital of France."


@pytest.mark.parametrize("name", HOPS)
def test_tei_rerank_truncates_in_the_asked_direction(name: str, hops: Any) -> None:
    """``truncation_direction`` on /rerank: ``Left`` keeps the document's end (the sentence that
    answers), ``Right`` its start; each score is the cosine of the query's and the document's
    vectors as /embed makes them with the same truncation."""
    query = post(hops[name], "/embed", {"inputs": QUERY}).json()[0]
    scores = {}
    for direction in ("Left", "Right"):
        body = {"query": QUERY, "texts": [LONG_DOC], "truncate": True, "truncation_direction": direction}
        r = post(hops[name], "/rerank", body)
        assert r.status_code == 200, r.text
        scores[direction] = r.json()[0]["score"]
        doc = post(hops[name], "/embed", {"inputs": LONG_DOC, "truncate": True, "truncation_direction": direction})
        assert scores[direction] == pytest.approx(cosine(query, doc.json()[0]), abs=1e-6)
    assert scores["Left"] > scores["Right"] + 0.05, scores
