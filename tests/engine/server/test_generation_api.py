"""Chat and completion endpoints, unary and streaming, on the real engine and model."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from genmesh.engine.openai.prompts import PromptTokenizer
from support.servers import MODEL_NAME
from support.sse import chunks, events

CHAT = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is OpenVINO?"}]


def post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=120)


def test_unary_chat_has_text_and_exact_usage(engine_url: str) -> None:
    # Greedy: a sampled reply may end at once with the end-of-turn token (one token, empty text).
    body = {"model": MODEL_NAME, "max_tokens": 30, "messages": CHAT, "temperature": 0}
    r = post(engine_url, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == MODEL_NAME
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"].strip()
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert 0 < usage["completion_tokens"] <= 30
    if choice["finish_reason"] == "length":
        assert usage["completion_tokens"] == 30


def test_prompt_tokens_match_the_chat_template(engine_url: str, engine_tokenizer: PromptTokenizer) -> None:
    from genmesh.protocol import ChatMessage

    prompt = engine_tokenizer.chat_prompt([ChatMessage(**m) for m in CHAT])
    expected = len(engine_tokenizer.encode(prompt, add_special_tokens=False))
    r = post(engine_url, "/v1/chat/completions", {"max_tokens": 2, "messages": CHAT})
    assert r.json()["usage"]["prompt_tokens"] == expected


def test_ignore_eos_generates_exactly_max_tokens(engine_url: str) -> None:
    r = post(engine_url, "/v1/completions", {"prompt": "Hi", "max_tokens": 40, "ignore_eos": True, "temperature": 0})
    body = r.json()
    assert body["usage"]["completion_tokens"] == 40
    assert body["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v3/chat/completions"])
def test_streamed_chat_equals_unary_for_greedy(engine_url: str, path: str) -> None:
    req = {
        "messages": [{"role": "user", "content": "Write a haiku about café naïveté 🌸"}],
        "max_tokens": 48,
        "temperature": 0,
    }
    unary = post(engine_url, path, req).json()
    with httpx.stream(
        "POST", engine_url + path, json={**req, "stream": True, "stream_options": {"include_usage": True}}, timeout=120
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        parsed = chunks(events(r))
    assert parsed[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in parsed)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in parsed if c["choices"])
    assert text == unary["choices"][0]["message"]["content"]
    finals = [c for c in parsed if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finals) == 1
    assert finals[0]["choices"][0]["finish_reason"] == unary["choices"][0]["finish_reason"]
    assert parsed[-1]["choices"] == []
    assert parsed[-1]["usage"] == unary["usage"]


def test_stream_without_include_usage_has_no_usage_chunk(engine_url: str) -> None:
    req = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "stream": True}
    with httpx.stream("POST", engine_url + "/v1/chat/completions", json=req, timeout=120) as r:
        parsed = chunks(events(r))
    assert all(c["choices"] for c in parsed)
    assert all(c.get("usage") is None for c in parsed)


@pytest.mark.parametrize("path", ["/v1/completions", "/v3/completions"])
def test_completion_unary_and_stream_agree(engine_url: str, path: str) -> None:
    req = {"model": MODEL_NAME, "prompt": "The capital of France is", "max_tokens": 24, "temperature": 0}
    unary = post(engine_url, path, req).json()
    assert unary["object"] == "text_completion"
    assert unary["usage"]["completion_tokens"] > 0
    with httpx.stream("POST", engine_url + path, json={**req, "stream": True}, timeout=120) as r:
        parsed = chunks(events(r))
    assert all(c["object"] == "text_completion" for c in parsed)
    assert "".join(c["choices"][0]["text"] for c in parsed) == unary["choices"][0]["text"]


def test_stop_string_ends_generation_without_it(engine_url: str) -> None:
    base = {"prompt": "Count: 1, 2, 3, 4, 5, 6, 7, 8,", "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    free = post(engine_url, "/v1/completions", base).json()["choices"][0]["text"]
    # The stop string is taken from this machine's own greedy text (the text differs between CPUs).
    stop = free[len(free) // 2 :].strip()[:2]
    assert stop, free
    body = post(engine_url, "/v1/completions", {**base, "stop": [stop, "never-appears"]}).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert stop not in choice["text"]
    assert choice["text"] == free[: free.index(stop)]
    # streaming honours it the same way
    with httpx.stream(
        "POST", engine_url + "/v1/completions", json={**base, "stop": stop, "stream": True}, timeout=120
    ) as r:
        parsed = chunks(events(r))
    assert "".join(c["choices"][0]["text"] for c in parsed) == choice["text"]
    assert parsed[-1]["choices"][0]["finish_reason"] == "stop"


def test_seeded_sampling_is_reproducible(engine_url: str) -> None:
    req = {"prompt": "Once upon a time", "max_tokens": 20, "temperature": 1.0, "top_p": 0.9, "top_k": 40, "seed": 7}
    a = post(engine_url, "/v1/completions", req).json()["choices"][0]["text"]
    b = post(engine_url, "/v1/completions", req).json()["choices"][0]["text"]
    assert a == b


def test_models_config_and_request_id(engine_url: str) -> None:
    models = httpx.get(engine_url + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == [MODEL_NAME]
    cfg = httpx.get(engine_url + "/v1/config").json()
    assert cfg[MODEL_NAME]["model_version_status"][0]["state"] == "AVAILABLE"
    r = httpx.post(
        engine_url + "/v1/completions", json={"prompt": "a", "max_tokens": 1}, headers={"X-Request-ID": "trace-123"}
    )
    assert r.headers["x-request-id"] == "trace-123"
    assert httpx.get(engine_url + "/health").headers["x-request-id"]
