"""OPEA's shapes and leniencies in process: the chat shapes OPEA's pipelines send (``LLMParamsDoc``,
``SearchedDoc``, ``documents``), the default token limit, Whisper's language names, the engine's
``--*-model-name`` aliases. Their answers from the real engine are in test_microservice_opea_shapes.py."""

from __future__ import annotations

from typing import Any

import pytest

from genmesh.engine.settings import model_names
from genmesh.microservice import parse_settings
from genmesh.microservice.normalise import CHAT_PATH, COMPLETIONS_PATH, normalise_chat
from genmesh.protocol import OpenAIError
from genmesh.protocol.audio import TranscriptionRequest
from genmesh.protocol.opea import rag_prompt

DOCS = ["Paris is the capital of France.", "The Nile is a river."]


def test_llm_params_doc_becomes_a_streamed_rag_completion_with_opea_s_parameters() -> None:
    # what OPEA's orchestrator sends the LLM after its reranker: the doc, with every LLMParams field merged in
    raw = {"id": "x", "query": "What is the capital of France?", "documents": DOCS, "model": None}
    raw |= {"max_new_tokens": 1024, "top_k": 10, "typical_p": 0.95, "repetition_penalty": 1.03, "language": "auto"}
    call = normalise_chat(raw, "m1", 1024)
    assert call.path == COMPLETIONS_PATH
    assert call.stream is True
    assert call.body["model"] == "m1"
    assert call.body["prompt"] == rag_prompt(raw["query"], DOCS)
    assert DOCS[0] in call.body["prompt"]
    assert raw["query"] in call.body["prompt"]
    assert call.body["max_tokens"] == 1024
    assert (call.body["temperature"], call.body["top_p"], call.body["frequency_penalty"]) == (0.01, 0.95, 0.0)
    assert not {"top_k", "typical_p", "repetition_penalty", "language", "id"} & call.body.keys()


def test_llm_params_doc_takes_its_own_limit_stream_and_template() -> None:
    raw = {"query": "q?", "documents": [{"text": "d1"}], "max_tokens": 7, "stream": False}
    raw["chat_template"] = "Context: {context}\nQ: {question}\nA:"
    call = normalise_chat(raw, None, 1024)
    assert call.body["prompt"] == "Context: d1\nQ: q?\nA:"
    assert call.body["max_tokens"] == 7
    assert call.stream is False


def test_searched_doc_becomes_a_unary_rag_completion() -> None:
    raw = {"initial_query": "q?", "retrieved_docs": [{"text": d} for d in DOCS], "top_n": 1}
    call = normalise_chat(raw, "m1", 64)
    assert call.path == COMPLETIONS_PATH
    assert call.stream is False
    assert call.body == {"model": "m1", "prompt": rag_prompt("q?", DOCS), "max_tokens": 64, "temperature": 0.01}


def test_documents_beside_messages_are_the_context() -> None:
    # OPEA's ChatCompletionRequest after its reranker: documents set, its retrieval fields carried along
    raw: dict[str, Any] = {"messages": "q?", "documents": DOCS, "input": "q?", "retrieved_docs": [], "top_n": 1, "k": 4}
    call = normalise_chat(raw, None, 32)
    assert call.body == {"prompt": rag_prompt("q?", DOCS), "max_tokens": 32}
    msgs = [{"role": "system", "content": "Use: {context}"}, {"role": "user", "content": "q?"}]
    call = normalise_chat({"messages": msgs, "documents": ["d1", "d2"]}, None)
    assert call.path == CHAT_PATH
    assert call.body["messages"][0] == {"role": "system", "content": "Use: d1\nd2"}
    call = normalise_chat({"messages": msgs[1:], "documents": ["d1"]}, None)
    assert call.body["messages"][0]["role"] == "system"
    assert "d1" in call.body["messages"][0]["content"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, 1024),
        ({"messages": "hi"}, 1024),
        ({"messages": "hi", "max_tokens": 3}, 3),
        ({"messages": "hi", "max_new_tokens": 4}, 4),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": None}, None),
    ],
)
def test_a_chat_without_a_limit_gets_the_default(raw: dict[str, Any], expected: int | None) -> None:
    assert normalise_chat(raw, None, 1024).body["max_tokens"] == expected


def test_max_completion_tokens_is_a_limit_too() -> None:
    body = normalise_chat(
        {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 5}, None, 1024
    ).body
    assert body["max_completion_tokens"] == 5
    assert "max_tokens" not in body


def test_default_max_tokens_is_opea_s_and_0_means_none() -> None:
    assert parse_settings([]).default_max_tokens == 1024
    assert parse_settings(["--default-max-tokens", "0"]).default_max_tokens == 0


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ({"query": ""}, "query"),
        ({"query": 3}, "query"),
        ({"query": "q", "max_tokens": 0}, "max_tokens"),
        ({"query": "q", "temperature": "hot"}, "temperature"),
        ({"query": "q", "documents": "d"}, "documents"),
        ({"initial_query": "q"}, "retrieved_docs"),
        ({"initial_query": "q", "retrieved_docs": [{"txt": "d"}]}, "retrieved_docs[0].text"),
        ({"messages": "q", "documents": "d"}, "documents"),
        ({"messages": "q", "documents": [3]}, "documents[0]"),
        ({"messages": "q", "chat_template": 3}, "chat_template"),
    ],
)
def test_bad_opea_shapes_are_a_400_naming_the_field(raw: dict[str, Any], param: str) -> None:
    with pytest.raises(OpenAIError) as info:
        normalise_chat(raw, None, 16)
    assert info.value.status == 400
    assert info.value.param == param


@pytest.mark.parametrize(
    ("given", "code"),
    [("english", "en"), ("English", "en"), ("en", "en"), ("haitian creole", "ht"), ("mandarin", "zh"), ("auto", None)],
)
def test_whisper_language_names_mean_their_code(given: str, code: str | None) -> None:
    assert TranscriptionRequest.from_form([("language", given)]).language == code


def test_an_unknown_language_name_is_a_400() -> None:
    with pytest.raises(OpenAIError) as info:
        TranscriptionRequest.from_form([("language", "klingon")])
    assert info.value.status == 400
    assert info.value.param == "language"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, (None, ())),
        ("m", ("m", ())),
        ("SmolLM2-135M-Instruct,tgi", ("SmolLM2-135M-Instruct", ("tgi",))),
        (" a , b,c ", ("a", ("b", "c"))),
    ],
)
def test_model_names_are_a_name_and_aliases(value: str | None, expected: tuple[str | None, tuple[str, ...]]) -> None:
    assert model_names(value) == expected
