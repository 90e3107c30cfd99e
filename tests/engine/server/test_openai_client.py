"""The official OpenAI Python client against the engine (unary and streaming, /v1 and /v3)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from support.servers import MODEL_NAME

# Greedy, and every reply runs to max_tokens: a sampled reply may end at once with empty text.
FIXED_LENGTH: dict[str, Any] = {"temperature": 0, "extra_body": {"ignore_eos": True}}


@pytest.fixture(params=["/v1", "/v3"])
def client(engine_url: str, request: pytest.FixtureRequest) -> openai.OpenAI:
    return openai.OpenAI(base_url=engine_url + request.param, api_key="unused", max_retries=0)


def test_chat_unary(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Say this is a test"}], max_tokens=16, **FIXED_LENGTH
    )
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason == "length"
    assert r.usage is not None
    assert r.usage.completion_tokens == 16


def test_chat_stream(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL_NAME,
        messages=[{"role": "user", "content": "Say this is a test"}],
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
        **FIXED_LENGTH,
    )
    text, usage = "", None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage
    assert text
    assert usage is not None
    assert usage.completion_tokens == 16


def test_completion_stream_and_unary(client: openai.OpenAI) -> None:
    unary = client.completions.create(model=MODEL_NAME, prompt="Say this is a test.", max_tokens=12, temperature=0)
    stream = client.completions.create(
        model=MODEL_NAME, prompt="Say this is a test.", max_tokens=12, temperature=0, stream=True
    )
    streamed = "".join(c.choices[0].text for c in stream if c.choices)
    assert streamed == unary.choices[0].text


def test_errors_surface_as_openai_exceptions(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "x"}], logit_bias={"5": 1}
        )
    assert "'logit_bias'" in str(exc.value)
