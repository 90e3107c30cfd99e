"""Real clients through the microservice to the real engine: the official ``openai`` SDK and LangChain."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from langchain_openai import ChatOpenAI

from support.servers import MODEL_NAME

GREEDY: dict[str, Any] = {"temperature": 0, "extra_body": {"ignore_eos": True}}
QUESTION = "What is Deep Learning?"


@pytest.fixture
def client(microservice_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=microservice_url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_openai_chat_unary(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": QUESTION}], max_tokens=8, **GREEDY
    )
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.content
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 8


def test_openai_chat_stream(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL_NAME,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
        **GREEDY,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 8
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_openai_string_messages_as_opea_sends_them(client: openai.OpenAI) -> None:
    # OPEA clients send ``messages`` as a plain string; the SDK's types want a list, so it goes in extra_body.
    reply = client.chat.completions.create(
        model=MODEL_NAME,
        messages=[],
        max_tokens=6,
        temperature=0,
        extra_body={"messages": QUESTION, "ignore_eos": True},
    )
    assert reply.to_dict()["object"] == "text_completion"
    assert (reply.choices[0].model_extra or {})["text"]
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 6


def test_openai_string_messages_stream(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL_NAME,
        messages=[],
        max_tokens=6,
        stream=True,
        temperature=0,
        extra_body={"messages": QUESTION, "ignore_eos": True},
    )
    chunks = list(stream)
    assert {c.object for c in chunks} == {"text_completion"}
    text = "".join((c.choices[0].model_extra or {}).get("text", "") for c in chunks if c.choices)
    assert text.strip()


def test_openai_legacy_completions(client: openai.OpenAI) -> None:
    reply = client.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=5, **GREEDY)
    assert reply.choices[0].text
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 5


def test_openai_models(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [MODEL_NAME]


def test_openai_sees_an_openai_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "x"}], max_tokens=-3)
    assert info.value.status_code == 400
    assert isinstance(info.value.body, dict)
    assert info.value.body["param"] == "max_tokens"


@pytest.fixture
def chat_model(microservice_url: str) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=microservice_url + "/v1",
        api_key="unused",  # type: ignore[arg-type]
        model=MODEL_NAME,
        max_tokens=8,  # type: ignore[call-arg]
        temperature=0,
        max_retries=0,
        timeout=60,
        extra_body={"ignore_eos": True},
    )


def test_langchain_invoke(chat_model: ChatOpenAI) -> None:
    message = chat_model.invoke(QUESTION)
    assert isinstance(message.content, str)
    assert message.content
    assert message.usage_metadata is not None
    assert message.usage_metadata["output_tokens"] == 8


def test_langchain_stream(chat_model: ChatOpenAI) -> None:
    chunks = list(chat_model.stream(QUESTION))
    text = "".join(str(c.content) for c in chunks)
    assert len([c for c in chunks if c.content]) >= 2
    assert text == chat_model.invoke(QUESTION).content
