"""The OPEA contract against the real engine: the seed README's requests, exactly as written, and the OPEA keys."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from support.servers import GENMESH_ENGINE_ONLY, MODEL_NAME

JSON = {"Content-Type": "application/json"}

# The README's three requests, byte for byte (the shell variable left unexpanded, as users paste it).
SEED_STRING = '{"model": "${model_name}", "messages": "What is Deep Learning?", "max_tokens":17}'
SEED_LIST = (
    '{"model": "${model_name}", "messages": [{"role": "user", "content": "What is Deep Learning?"}], "max_tokens":17}'
)
SEED_STRING_NON_STREAM = (
    '{"model": "${model_name}", "messages": "What is Deep Learning?", "max_tokens":17, "stream":false}'
)

GREEDY = {"temperature": 0, "ignore_eos": True}


def sse_payloads(response: httpx.Response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]


def stream_text(payloads: list[str]) -> str:
    text = ""
    for data in payloads:
        if data == "[DONE]":
            continue
        choice = json.loads(data)["choices"]
        if choice:
            text += choice[0].get("text") or (choice[0].get("delta") or {}).get("content") or ""
    return text


def test_health_check_is_the_opea_body(microservice_url: str) -> None:
    r = httpx.get(microservice_url + "/v1/health_check", headers=JSON)
    assert r.status_code == 200
    body = r.json()
    assert body["Service Title"] == "opea_service@llm_genmesh/MicroService"
    assert body["Service Description"] == "OPEA Microservice Infrastructure"
    assert body["Version"] == "0.1.0"


@pytest.mark.parametrize("body", [SEED_STRING, SEED_STRING_NON_STREAM], ids=["no-stream-key", "stream-false"])
def test_seed_string_messages_give_a_text_completion(microservice_url: str, body: str) -> None:
    r = httpx.post(microservice_url + "/v1/chat/completions", content=body, headers=JSON, timeout=60)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["object"] == "text_completion"
    assert reply["model"] == MODEL_NAME
    assert isinstance(reply["choices"][0]["text"], str)
    assert reply["choices"][0]["finish_reason"] in ("stop", "length")
    assert 1 <= reply["usage"]["completion_tokens"] <= 17
    assert reply["usage"]["prompt_tokens"] > 0


def test_seed_list_messages_give_a_chat_completion(microservice_url: str) -> None:
    r = httpx.post(microservice_url + "/v1/chat/completions", content=SEED_LIST, headers=JSON, timeout=60)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"]["role"] == "assistant"
    assert isinstance(reply["choices"][0]["message"]["content"], str)
    assert 1 <= reply["usage"]["completion_tokens"] <= 17


@pytest.mark.parametrize(
    ("messages", "obj"),
    [
        ("What is Deep Learning?", "text_completion"),
        ([{"role": "user", "content": "What is Deep Learning?"}], "chat.completion.chunk"),
    ],
    ids=["string", "list"],
)
@pytest.mark.parametrize("stream_key", ["stream", "streaming"])
def test_seed_requests_stream(microservice_url: str, messages: Any, obj: str, stream_key: str) -> None:
    body = {"model": "${model_name}", "messages": messages, "max_tokens": 17, stream_key: True, **GREEDY}
    body["stream_options"] = {"include_usage": True}
    r = httpx.post(microservice_url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(r)
    assert payloads[-1] == "[DONE]"
    assert payloads.count("[DONE]") == 1
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert {c["object"] for c in chunks} == {obj}
    assert chunks[-1]["usage"]["completion_tokens"] == 17
    assert stream_text(payloads)


@pytest.mark.parametrize(
    "messages",
    ["What is Deep Learning?", [{"role": "user", "content": "What is Deep Learning?"}]],
    ids=["string", "list"],
)
def test_streamed_text_equals_the_unary_text_and_the_engine_s(
    microservice_url: str, engine_url: str, messages: Any
) -> None:
    body = {"messages": messages, "max_tokens": 12, **GREEDY}
    unary = httpx.post(microservice_url + "/v1/chat/completions", json=body, timeout=60).json()
    streamed = httpx.post(microservice_url + "/v1/chat/completions", json={**body, "stream": True}, timeout=60)
    if isinstance(messages, str):
        direct = httpx.post(engine_url + "/v1/completions", json={"prompt": messages, "max_tokens": 12, **GREEDY})
        unary_text, direct_text = unary["choices"][0]["text"], direct.json()["choices"][0]["text"]
    else:
        direct = httpx.post(engine_url + "/v1/chat/completions", json=body, timeout=60)
        unary_text = unary["choices"][0]["message"]["content"]
        direct_text = direct.json()["choices"][0]["message"]["content"]
    assert unary_text
    assert stream_text(sse_payloads(streamed)) == unary_text == direct_text


def test_max_new_tokens_and_sampling_extras_reach_the_engine(microservice_url: str) -> None:
    body = {"messages": "Count to ten:", "max_new_tokens": 7, "top_k": 5, "top_p": 0.9, "seed": 1, **GREEDY}
    r = httpx.post(microservice_url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 7


@GENMESH_ENGINE_ONLY
def test_a_parameter_the_engine_refuses_is_relayed_with_its_status(microservice_url: str) -> None:
    # The engine does not implement logit_bias and says so by name; the microservice relays it.
    body = {"messages": "hi", "max_tokens": 3, "logit_bias": {"42": 5}}
    r = httpx.post(microservice_url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "logit_bias"


def test_request_id_is_echoed_and_created(microservice_url: str) -> None:
    body = {"messages": "hi", "max_tokens": 2}
    given = httpx.post(microservice_url + "/v1/chat/completions", json=body, headers={"X-Request-ID": "opea-rid-1"})
    created = httpx.post(microservice_url + "/v1/chat/completions", json=body)
    assert given.headers["x-request-id"] == "opea-rid-1"
    assert len(created.headers["x-request-id"]) >= 16


def test_completions_and_models_pass_through(microservice_url: str) -> None:
    body = {"model": MODEL_NAME, "prompt": "The sky is", "max_tokens": 4, **GREEDY}
    r = httpx.post(microservice_url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "text_completion"
    assert r.json()["usage"]["completion_tokens"] == 4
    models = httpx.get(microservice_url + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == [MODEL_NAME]


@GENMESH_ENGINE_ONLY
def test_unknown_model_is_the_engine_s_404(microservice_url: str) -> None:
    r = httpx.post(microservice_url + "/v1/chat/completions", json={"model": "no-such-model", "messages": "hi"})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"
