"""End to end: client -> gateway -> llm-microservice -> the real engine on the real model."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import pytest

from support.leaders import assert_leads
from support.servers import (
    GENMESH_ENGINE_ONLY,
    MODEL_NAME,
    Server,
    engine_running,
    wait_until,
)


def _running(engine_url: str) -> float:
    return engine_running(engine_url)


def test_chat_stream_and_cancel_through_the_mesh(
    start_gateway: Any, mesh_microservice: Server, engine_url: str, helpers: Any
) -> None:
    ups = [{"url": mesh_microservice.url, "max_concurrency": 2, "health_path": "/v1/health_check"}]
    gw = start_gateway({MODEL_NAME: {"upstreams": ups}})
    # Greedy to a fixed length: a sampled reply may end at once, with empty text.
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
    body |= {"temperature": 0, "ignore_eos": True}
    r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers={"X-Request-ID": "e2e-1"}, timeout=120)
    assert r.status_code == 200, r.text
    assert r.headers["x-request-id"] == "e2e-1"
    reply = r.json()
    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"]["content"]
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 8

    # OPEA string messages pass through untouched and come back as a text completion
    opea = {"model": MODEL_NAME, "messages": "The capital of France is", "max_tokens": 4}
    r = httpx.post(gw.url + "/v1/chat/completions", json=opea, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "text_completion"

    with httpx.stream("POST", gw.url + "/v1/chat/completions", json={**body, "stream": True}, timeout=120) as s:
        payloads = [line[6:] for line in s.iter_lines() if line.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert all(c.get("usage") is None for c in chunks), [
        c for c in chunks if c.get("usage")
    ]  # the gateway's own usage chunk is not relayed

    # a client that goes away mid-stream: the engine aborts the generation
    wait_until(lambda: _running(engine_url) == 0, 60, what="idle engine")
    long = {**body, "max_tokens": 2000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=long, timeout=120) as s:
        lines = s.iter_lines()  # held: breaking out of the loop must not close the stream
        got = 0
        for line in lines:
            got += line.startswith("data: ")
            if got >= 3:
                break
        assert _running(engine_url) == 1
    wait_until(lambda: _running(engine_url) == 0, 15, what="engine abort after the client left the gateway")


@GENMESH_ENGINE_ONLY
def test_tools_structured_output_and_n_through_the_mesh(
    start_gateway: Any, mesh_microservice: Server, engine_url: str
) -> None:
    """The engine's parameters reach it through gateway and microservice, and its replies come back whole."""
    ups = [{"url": mesh_microservice.url, "max_concurrency": 4, "health_path": "/v1/health_check"}]
    gw = start_gateway({MODEL_NAME: {"upstreams": ups}})
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 20}},
                "required": ["city"],
            },
        },
    }
    ask = [{"role": "user", "content": "Weather in Oslo?"}]
    body = {"model": MODEL_NAME, "messages": ask, "tools": [tool], "tool_choice": "required", "max_tokens": 80}
    body["temperature"] = 0
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json={**body, "stream": True}, timeout=120) as s:
        chunks = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: {")]
    calls = [c for ch in chunks for choice in ch["choices"] for c in choice["delta"].get("tool_calls") or []]
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    assert isinstance(json.loads(calls[0]["function"]["arguments"])["city"], str)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"

    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    r = httpx.post(
        gw.url + "/v1/chat/completions",
        json={
            "model": MODEL_NAME,
            "messages": [{"role": "user", "content": "Invent a cat."}],
            "response_format": fmt,
            "n": 2,
            "max_tokens": 120,
            "temperature": 0.8,
            "logprobs": True,
        },
        timeout=120,
    )
    assert r.status_code == 200, r.text
    reply = r.json()
    choices = reply["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    # What holds for every sample: the grammar reached the engine, so each answer is JSON from its
    # first character; one that ended by itself is a whole object that meets the schema (one cut by
    # max_tokens may not be); and every generated token comes back with its logprob.
    for c in choices:
        assert c["finish_reason"] in ("stop", "length"), c
        assert c["message"]["content"].lstrip()[:1] in ("", "{"), c
        if c["finish_reason"] == "stop":
            jsonschema.validate(json.loads(c["message"]["content"]), schema)
    assert sum(len(c["logprobs"]["content"]) for c in choices) == reply["usage"]["completion_tokens"]


def test_top_logprobs_and_prompt_scoring_through_the_mesh(
    start_gateway: Any, mesh_microservice: Server, engine_url: str
) -> None:
    """Every hop passes the scorer's fields both ways: true top-k (the greedy token leads the list
    even when a high temperature sampled another), unary and streamed, and lm-eval's scoring
    request (token ids, echo, logprobs, max_tokens 0) with the same figures as at the engine."""
    ups = [{"url": mesh_microservice.url, "max_concurrency": 2, "health_path": "/v1/health_check"}]
    gw = start_gateway({MODEL_NAME: {"upstreams": ups}})
    msg = [{"role": "user", "content": "What is the capital of France?"}]
    greedy = {"model": MODEL_NAME, "messages": msg, "max_tokens": 1, "temperature": 0, "logprobs": True}
    # twice: the second sees the prefix cache as the requests below do
    httpx.post(engine_url + "/v1/chat/completions", json=greedy, timeout=120)
    r = httpx.post(engine_url + "/v1/chat/completions", json=greedy, timeout=120)
    best = r.json()["choices"][0]["logprobs"]["content"][0]["token"]
    hot = {**greedy, "max_tokens": 4, "temperature": 2.0, "seed": 11, "top_logprobs": 3}
    r = httpx.post(gw.url + "/v1/chat/completions", json=hot, timeout=120)
    assert r.status_code == 200, r.text
    content = r.json()["choices"][0]["logprobs"]["content"]
    assert_leads(content[0]["top_logprobs"], best)  # (within bf16's noise: support/leaders.py)
    assert all(len(e["top_logprobs"]) == 3 for e in content)
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json={**hot, "stream": True}, timeout=120) as s:
        payloads = [line[6:] for line in s.iter_lines() if line.startswith("data: ")]
    streamed = [
        e
        for c in (json.loads(p) for p in payloads[:-1])
        for ch in c["choices"]
        if ch.get("logprobs")
        for e in ch["logprobs"]["content"]
    ]
    assert_leads(streamed[0]["top_logprobs"], best)
    assert all(len(e["top_logprobs"]) == 3 for e in streamed)

    ids = httpx.post(engine_url + "/tokenize", json={"prompt": "The capital of France is Paris"}, timeout=30).json()
    scoring = {"model": MODEL_NAME, "prompt": ids["tokens"], "echo": True, "logprobs": 1, "max_tokens": 0}
    at_engine = httpx.post(engine_url + "/v1/completions", json=scoring, timeout=120).json()
    r = httpx.post(gw.url + "/v1/completions", json=scoring, timeout=120)
    assert r.status_code == 200, r.text
    via_mesh = r.json()["choices"][0]["logprobs"]
    assert via_mesh["tokens"] == at_engine["choices"][0]["logprobs"]["tokens"]
    assert via_mesh["token_logprobs"][0] is None
    assert via_mesh["token_logprobs"][1:] == pytest.approx(at_engine["choices"][0]["logprobs"]["token_logprobs"][1:])
    r = httpx.post(gw.url + "/v1/completions", json={**scoring, "logprobs": 21}, timeout=120)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "logprobs"
