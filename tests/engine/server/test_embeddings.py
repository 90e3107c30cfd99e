"""``/v1/embeddings`` on the real engine with the real all-MiniLM-L6-v2, beside the chat model:
fidelity against the independent numpy reference, dynamic batching, the OpenAI SDK, bad input."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from support.embeddings import REFERENCE, SENTENCES, check_fidelity, cosines, vectors_of
from support.servers import EMBEDDING_NAME, MODEL_NAME

LONG = " ".join(["retrieval"] * 300)  # past the model's 256 tokens


def embed(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + "/v1/embeddings", json={"model": EMBEDDING_NAME, **body}, timeout=120)


def test_one_request_of_every_sentence_matches_the_reference(embedding_engine_url: str) -> None:
    r = embed(embedding_engine_url, {"input": SENTENCES, "truncate_prompt_tokens": -1})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list"
    assert body["model"] == EMBEDDING_NAME
    assert [d["index"] for d in body["data"]] == list(range(len(SENTENCES)))
    check_fidelity(vectors_of(body))
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > len(SENTENCES) * 2


async def test_concurrent_single_requests_are_batched_and_match_the_reference(embedding_engine_url: str) -> None:
    """Each sentence alone, all at once: they share batches (padded, masked) and still match;
    a bad request among them changes nothing for the others."""
    async with httpx.AsyncClient(base_url=embedding_engine_url, timeout=300) as client:

        async def one(text: str) -> httpx.Response:
            body = {"model": EMBEDDING_NAME, "input": text, "truncate_prompt_tokens": -1}
            return await client.post("/v1/embeddings", json=body)

        async def bad() -> httpx.Response:
            return await client.post("/v1/embeddings", json={"model": EMBEDDING_NAME, "input": [[5, 40000]]})

        replies = await asyncio.gather(*(one(t) for t in SENTENCES), *(bad() for _ in range(5)))
        metrics = (await client.get("/metrics")).text
    good, refused = replies[: len(SENTENCES)], replies[len(SENTENCES) :]
    assert all(r.status_code == 200 for r in good), [r.text for r in good if r.status_code != 200][:1]
    assert all(r.status_code == 400 for r in refused)
    check_fidelity(np.concatenate([vectors_of(r.json()) for r in good]))
    batches = _sample(metrics, "genmesh_embedding_batches_total")
    inputs = _sample(metrics, "genmesh_embedding_inputs_total")
    assert inputs >= len(SENTENCES)
    assert batches < inputs  # some inputs shared a batch


def _sample(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name) and f'model="{EMBEDDING_NAME}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_base64_is_the_float_vector(embedding_engine_url: str) -> None:
    floats = embed(embedding_engine_url, {"input": ["naïve café", "hello"]}).json()
    packed = embed(embedding_engine_url, {"input": ["naïve café", "hello"], "encoding_format": "base64"}).json()
    assert isinstance(packed["data"][0]["embedding"], str)
    decoded = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
    assert np.array_equal(decoded, np.array(floats["data"][0]["embedding"], dtype=np.float32))


def test_token_ids_input_and_usage(embedding_engine_url: str) -> None:
    text = SENTENCES[0]
    by_text = embed(embedding_engine_url, {"input": text}).json()
    ids = httpx.post(embedding_engine_url + "/tokenize", json={"model": MODEL_NAME, "prompt": "x"}, timeout=30)
    assert ids.status_code == 200  # the chat model's /tokenize is untouched
    from tokenizers import Tokenizer

    from support.servers import EMBEDDING_MODEL

    tok = Tokenizer.from_file(str(EMBEDDING_MODEL / "tokenizer.json"))
    tok.no_padding()
    token_ids = tok.encode(text).ids
    by_ids = embed(embedding_engine_url, {"input": token_ids}).json()
    both = embed(embedding_engine_url, {"input": [token_ids, token_ids[:5]]}).json()
    assert by_text["usage"]["prompt_tokens"] == len(token_ids) == by_ids["usage"]["prompt_tokens"]
    assert both["usage"]["prompt_tokens"] == len(token_ids) + 5
    assert cosines(vectors_of(by_ids), REFERENCE[:1]).min() >= 0.9999
    assert np.allclose(vectors_of(both)[0], vectors_of(by_text)[0], atol=1e-5)


def test_truncation_only_when_asked(embedding_engine_url: str) -> None:
    r = embed(embedding_engine_url, {"input": ["short", LONG]})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "input"
    assert "input[1]" in err["message"]
    assert "256" in err["message"]
    cut = embed(embedding_engine_url, {"input": LONG, "truncate_prompt_tokens": 10}).json()
    assert cut["usage"]["prompt_tokens"] == 10
    full = embed(embedding_engine_url, {"input": LONG, "truncate_prompt_tokens": -1}).json()
    assert full["usage"]["prompt_tokens"] == 256


def test_openai_sdk_float_and_base64(embedding_engine_url: str) -> None:
    client = openai.OpenAI(base_url=embedding_engine_url + "/v1", api_key="unused")
    floats = client.embeddings.create(model=EMBEDDING_NAME, input=SENTENCES[:3], encoding_format="float")
    packed = client.embeddings.create(model=EMBEDDING_NAME, input=SENTENCES[:3], encoding_format="base64")
    default = client.embeddings.create(model=EMBEDDING_NAME, input=SENTENCES[:3])  # the SDK asks base64, decodes
    for reply in (floats, default):
        assert cosines(np.array([d.embedding for d in reply.data]), REFERENCE[:3]).min() >= 0.9999
    # asked for base64 explicitly, the SDK hands the strings over as sent
    assert (
        cosines(
            vectors_of({"data": [{"index": d.index, "embedding": d.embedding} for d in packed.data]}), REFERENCE[:3]
        ).min()
        >= 0.9999
    )
    assert floats.usage.prompt_tokens > 0


def test_models_lists_both_and_health_counts_both(embedding_engine_url: str) -> None:
    models = httpx.get(embedding_engine_url + "/v1/models", timeout=10).json()["data"]
    assert {m["id"]: m["max_model_len"] for m in models} == {MODEL_NAME: 8192, EMBEDDING_NAME: 256}
    health = httpx.get(embedding_engine_url + "/health", timeout=10).json()
    assert health["models"] == {MODEL_NAME: "AVAILABLE", EMBEDDING_NAME: "AVAILABLE"}
    config = httpx.get(embedding_engine_url + "/v1/config", timeout=10).json()
    assert config[EMBEDDING_NAME]["model_version_status"][0]["state"] == "AVAILABLE"


BAD: list[tuple[str, dict[str, Any], int, str]] = [
    ("empty list", {"input": []}, 400, "input"),
    ("empty string", {"input": ""}, 400, "input"),
    ("an empty string in the list", {"input": ["a", ""]}, 400, "input"),
    ("an empty id list", {"input": [[1, 2], []]}, 400, "input"),
    ("too many inputs", {"input": ["a"] * 2049}, 400, "input"),
    ("over the length limit", {"input": ["ok", LONG]}, 400, "input"),
    ("ids outside the vocabulary", {"input": [101, 30522, 102]}, 400, "input"),
    ("negative id", {"input": [101, -1, 102]}, 400, "input"),
    ("a number", {"input": 5}, 400, "input"),
    ("floats", {"input": [1.5, 2.5]}, 400, "input"),
    ("mixed kinds", {"input": ["a", [1, 2]]}, 400, "input"),
    ("a dict", {"input": {"text": "a"}}, 400, "input"),
    ("unknown encoding_format", {"input": "a", "encoding_format": "binary"}, 400, "encoding_format"),
    ("dimensions it cannot give", {"input": "a", "dimensions": 128}, 400, "dimensions"),
    ("dimensions not a number", {"input": "a", "dimensions": "x"}, 400, "dimensions"),
    ("unknown field", {"input": "a", "pooling": "cls"}, 400, "pooling"),
    ("the chat model", {"input": "a", "model": MODEL_NAME}, 400, "model"),
    ("an unknown model", {"input": "a", "model": "no-such-model"}, 404, "model"),
]


@pytest.mark.parametrize(("body", "status", "param"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_an_openai_error_naming_its_param(
    embedding_engine_url: str, body: dict[str, Any], status: int, param: str
) -> None:
    r = embed(embedding_engine_url, body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param
    assert error["message"]
    assert error["type"]


def test_a_chat_request_to_the_embedding_model_is_a_400_naming_model(embedding_engine_url: str) -> None:
    for path, body in (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 1}),
    ):
        r = httpx.post(embedding_engine_url + path, json={"model": EMBEDDING_NAME, **body}, timeout=30)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "model"
    ok = httpx.post(
        embedding_engine_url + "/v1/chat/completions",
        json={"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        timeout=60,
    )
    assert ok.status_code == 200, ok.text
