"""OPEA's microservice shapes at the microservice hop, answered by the real engine (chat and
all-MiniLM-L6-v2, the session's embeddings mesh): reranking (its three inputs), ``TextDoc``
embeddings, the ``LLMParamsDoc`` / ``SearchedDoc`` chat inputs, the default token limit, and the
engine's ``tgi`` / ``tei`` aliases (``--served-model-name`` and ``--embedding-model-name`` in
tests/conftest.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from support.embeddings_mesh import Mesh
from support.hostile import start_microservice
from support.servers import EMBEDDING_NAME, MODEL_NAME, Server

QUERY = "What is the capital of France?"
DOCS = [
    "The Nile is the longest river in Africa.",
    "Paris is the capital and largest city of France.",
    "Bananas are rich in potassium.",
    "France borders Spain, Italy and Germany.",
]


@pytest.fixture(scope="module")
def ms(embeddings_mesh: Mesh) -> str:
    return embeddings_mesh.microservice.url


def _post(url: str, body: Any, status: int = 200) -> Any:
    r = httpx.post(url, json=body, timeout=60)
    assert r.status_code == status, r.text
    return r.json()


def _engine_scores(ms: str) -> list[tuple[int, float]]:
    body = {"model": EMBEDDING_NAME, "query": QUERY, "documents": DOCS, "return_documents": False}
    return [(r["index"], r["relevance_score"]) for r in _post(ms + "/v1/rerank", body)["results"]]


def test_reranking_request_answers_the_best_texts_with_rerank_s_scores(ms: str) -> None:
    scores = _engine_scores(ms)
    docs: list[Any] = [DOCS[0], {"text": DOCS[1], "metadata": {"source": "wiki"}}, {"text": DOCS[2]}, DOCS[3]]
    out = _post(ms + "/v1/reranking", {"input": QUERY, "retrieved_docs": docs, "top_n": 3})
    assert [(d["text"], d["score"]) for d in out["reranked_docs"]] == [(DOCS[i], s) for i, s in scores[:3]]
    assert out["reranked_docs"][0]["text"] == DOCS[1]
    one = _post(ms + "/v1/reranking", {"input": QUERY, "retrieved_docs": DOCS})  # OPEA's top_n: 1
    assert [d["text"] for d in one["reranked_docs"]] == [DOCS[1]]


def test_searched_doc_answers_an_llm_params_doc_the_llm_hop_takes(ms: str) -> None:
    searched = {"initial_query": QUERY, "retrieved_docs": [{"text": d} for d in DOCS], "top_n": 2, "id": "abc"}
    doc = _post(ms + "/v1/reranking", searched)
    scores = _engine_scores(ms)
    assert doc["query"] == QUERY
    assert doc["documents"] == [DOCS[i] for i, _ in scores[:2]]
    assert doc["stream"] is True
    assert doc["temperature"] == 0.01
    # the reranker's answer, as OPEA's orchestrator hands it on (unary here), answers a completion
    answer = _post(ms + "/v1/chat/completions", {**doc, "stream": False, "max_tokens": 4})
    assert answer["object"] == "text_completion"
    assert 1 <= answer["usage"]["completion_tokens"] <= 4
    assert answer["usage"]["prompt_tokens"] > 30  # the RAG prompt holds the documents
    empty = _post(ms + "/v1/reranking", {**searched, "retrieved_docs": []})
    assert (empty["query"], empty["documents"]) == (QUERY, [])


def test_chat_completion_request_comes_back_with_reranked_docs(ms: str) -> None:
    body = {"messages": QUERY, "input": QUERY, "retrieved_docs": [{"text": d} for d in DOCS], "top_n": 1}
    out = _post(ms + "/v1/reranking", {**body, "max_tokens": 3})
    assert out["documents"] == [DOCS[1]]
    assert out["reranked_docs"][0]["text"] == DOCS[1]
    assert out["messages"] == QUERY
    assert out["max_tokens"] == 3
    # and the LLM hop takes it as it is: documents as the context, the retrieval fields dropped
    answer = _post(ms + "/v1/chat/completions", out)
    assert answer["object"] == "text_completion"
    assert answer["usage"]["completion_tokens"] <= 3


def test_llm_params_doc_streams_by_default(ms: str) -> None:
    with httpx.stream("POST", ms + "/v1/chat/completions", json={"query": QUERY, "max_tokens": 3}, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert all(json.loads(e)["object"] == "text_completion" for e in events[:-1])


def test_text_doc_answers_an_embed_doc_with_the_openai_vector(ms: str) -> None:
    openai_vec = _post(ms + "/v1/embeddings", {"input": DOCS[1]})["data"][0]["embedding"]
    doc = _post(ms + "/v1/embeddings", {"text": DOCS[1]})
    assert doc["text"] == DOCS[1]
    assert doc["k"] == 4
    assert doc["search_type"] == "similarity"
    a, b = np.array(doc["embedding"]), np.array(openai_vec)
    assert float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) > 0.999999
    many = _post(ms + "/v1/embeddings", {"text": DOCS[:2], "k": 2})
    assert len(many["embedding"]) == 2
    assert len(many["embedding"][0]) == 384
    assert many["k"] == 2


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/reranking", {"retrieved_docs": ["d"]}, "input"),
    ("/v1/reranking", {"input": "", "retrieved_docs": ["d"]}, "input"),
    ("/v1/reranking", {"input": "q", "retrieved_docs": "d"}, "retrieved_docs"),
    ("/v1/reranking", {"input": "q", "retrieved_docs": ["d"], "top_n": 0}, "top_n"),
    ("/v1/reranking", {"initial_query": "q", "retrieved_docs": [{"text": 3}]}, "retrieved_docs[0].text"),
    ("/v1/reranking", {"initial_query": 5, "retrieved_docs": []}, "initial_query"),
    ("/v1/reranking", {"messages": "q", "retrieved_docs": [{"text": "d"}], "top_n": "two"}, "top_n"),
    ("/v1/reranking", {"messages": [], "retrieved_docs": []}, "input"),
    ("/v1/embeddings", {"text": ""}, "text"),
    ("/v1/embeddings", {"text": 3}, "text"),
    ("/v1/chat/completions", {"query": "q", "max_tokens": -1}, "max_tokens"),
]


@pytest.mark.parametrize(("path", "body", "param"), BAD)
def test_bad_opea_input_is_a_400_naming_the_field(ms: str, path: str, body: dict[str, Any], param: str) -> None:
    err = _post(ms + path, body, 400)["error"]
    assert err["param"] == param
    assert err["type"] == "invalid_request_error"


@pytest.fixture(scope="module")
def limited(embedding_engine_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_microservice(
        tmp_path_factory.mktemp("limited-ms"), embedding_engine_url, "--default-max-tokens", "5"
    )
    yield server
    server.stop()


@pytest.mark.parametrize("messages", [QUERY, [{"role": "user", "content": QUERY}]])
def test_a_chat_without_a_limit_gets_the_microservice_s_default(limited: Server, messages: Any) -> None:
    out = _post(limited.url + "/v1/chat/completions", {"messages": messages, "ignore_eos": True})
    assert out["usage"]["completion_tokens"] == 5
    assert out["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    ("path", "alias", "body"),
    [
        ("/v1/chat/completions", "tgi", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
        ("/v1/embeddings", "tei", {"input": "hi"}),
        ("/v1/rerank", "tei", {"query": "q", "documents": ["a", "b"]}),
    ],
)
def test_the_engine_answers_an_operator_s_alias(embedding_engine_url: str, path: str, alias: str, body: Any) -> None:
    assert _post(embedding_engine_url + path, {**body, "model": alias})
    assert _post(embedding_engine_url + path, {**body, "model": alias + "x"}, 404)["error"]["code"] == "model_not_found"


def test_an_alias_of_the_wrong_kind_is_a_400(embedding_engine_url: str) -> None:
    chat = {"model": "tei", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert _post(embedding_engine_url + "/v1/chat/completions", chat, 400)["error"]["param"] == "model"
    assert (
        _post(embedding_engine_url + "/v1/embeddings", {"model": "tgi", "input": "x"}, 400)["error"]["param"] == "model"
    )
    assert MODEL_NAME != "tgi"
