"""OPEA-style input → the engine request that serves it.

OPEA clients call ``/v1/chat/completions`` with ``messages`` either as a list of chat
messages (an OpenAI chat request) or as a plain string (a prompt). A string goes to the
engine's ``/v1/completions`` and the reply is a ``text_completion``; a list goes to
``/v1/chat/completions``. OPEA's own parameter names are mapped onto OpenAI's:
``max_new_tokens`` → ``max_tokens`` and ``streaming`` → ``stream``. Everything else passes
through untouched, after validation against the shared wire models, so a bad request is
refused here (400 naming the parameter) without a round trip to the engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from genmesh.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    RerankRequest,
    ResponsesRequest,
    ScoreRequest,
    from_validation_error,
    invalid_request,
)
from genmesh.protocol.tei import is_tei_rerank

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
RESPONSES_PATH = "/v1/responses"
EMBEDDINGS_PATH = "/v1/embeddings"
RERANK_PATH = "/v1/rerank"  # every rerank path (Cohere v1/v2, Jina, OVMS) takes one body: the engine's /v1/rerank
SCORE_PATH = "/v1/score"
# The wire model each path's body is validated against (and its API document shows; OPEA's string
# ``messages`` is accepted too).
REQUEST_MODELS: dict[str, type[BaseModel]] = {
    CHAT_PATH: ChatCompletionRequest,
    COMPLETIONS_PATH: CompletionRequest,
    RESPONSES_PATH: ResponsesRequest,
    EMBEDDINGS_PATH: EmbeddingRequest,
    RERANK_PATH: RerankRequest,
    SCORE_PATH: ScoreRequest,
}

# OPEA name → OpenAI name.
_RENAMES = {"max_new_tokens": "max_tokens", "streaming": "stream"}
# Chat-only limits that mean max_tokens when the request becomes a completion.
_CHAT_LIMITS = ("max_completion_tokens",)
# ``"model": "${model_name}"`` as written in OPEA's READMEs, sent with the shell variable unexpanded.
_PLACEHOLDER = re.compile(r"^\$\{?\w*\}?$|^<[^<>]*>$")


@dataclass(frozen=True)
class EngineCall:
    """Where a request goes on the engine, with what body, and whether the reply streams."""

    path: str
    body: dict[str, Any]
    stream: bool


def resolve_model(body: dict[str, Any], default_model: str | None) -> None:
    """Fill ``model`` from ``LLM_MODEL_ID`` when absent, empty or an unexpanded placeholder."""
    model = body.get("model")
    if isinstance(model, str) and model.strip() and not _PLACEHOLDER.match(model.strip()):
        return
    if model is not None and not isinstance(model, str):
        return  # let validation name the bad type
    if default_model is not None:
        body["model"] = default_model
    else:
        body.pop("model", None)  # the engine serves its only model


def _apply_renames(body: dict[str, Any]) -> None:
    for opea, openai in _RENAMES.items():
        if opea not in body:
            continue
        value = body.pop(opea)
        if openai in body and body[openai] != value:
            raise invalid_request(f"'{opea}' and '{openai}' disagree; send only one of them", param=opea)
        body[openai] = value


def _validate(model: type[BaseModel], body: dict[str, Any], rename_param: tuple[str, str] | None = None) -> None:
    try:
        model.model_validate(body)
    except ValidationError as exc:
        err = from_validation_error(exc)
        if rename_param is not None and err.param is not None and err.param.startswith(rename_param[0]):
            new = rename_param[1] + err.param.removeprefix(rename_param[0])
            err.message = err.message.replace(f"'{err.param}'", f"'{new}'")
            err.param = new
        raise err from exc


def normalise_chat(raw: dict[str, Any], default_model: str | None) -> EngineCall:
    """An OPEA/OpenAI ``/v1/chat/completions`` body → the engine call that answers it."""
    body = dict(raw)
    _apply_renames(body)
    resolve_model(body, default_model)
    if "messages" not in body:
        raise invalid_request("Missing required parameter: 'messages'", param="messages")
    messages = body["messages"]
    if isinstance(messages, str):
        if not messages.strip():
            raise invalid_request("'messages' must not be empty", param="messages")
        prompt_body = {k: v for k, v in body.items() if k != "messages"}
        prompt_body["prompt"] = messages
        for limit in _CHAT_LIMITS:
            if limit in prompt_body:
                value = prompt_body.pop(limit)
                prompt_body.setdefault("max_tokens", value)
        # A chat request has no token limit unless one is given; the legacy completions
        # endpoint would default to 16, so say "no limit" explicitly.
        prompt_body.setdefault("max_tokens", None)
        _validate(CompletionRequest, prompt_body, rename_param=("prompt", "messages"))
        return EngineCall(COMPLETIONS_PATH, prompt_body, bool(prompt_body.get("stream")))
    if isinstance(messages, list):
        _validate(ChatCompletionRequest, body)
        return EngineCall(CHAT_PATH, body, bool(body.get("stream")))
    raise invalid_request(
        "'messages' must be a string (a prompt) or a list of chat messages, "
        f"got {type(messages).__name__ if messages is not None else 'null'}",
        param="messages",
    )


def normalise_completion(raw: dict[str, Any], default_model: str | None) -> EngineCall:
    """``/v1/completions`` passes through; only ``model`` gets its default."""
    body = dict(raw)
    resolve_model(body, default_model)
    return EngineCall(COMPLETIONS_PATH, body, body.get("stream") is True)


def normalise_responses(raw: dict[str, Any], default_model: str | None) -> EngineCall:
    """``/v1/responses``: ``model`` gets its default; the body is checked against the shared wire
    model (a 400 naming the field) and relayed as sent."""
    body = dict(raw)
    resolve_model(body, default_model)
    _validate(ResponsesRequest, body)
    return EngineCall(RESPONSES_PATH, body, body.get("stream") is True)


def normalise_embeddings(raw: dict[str, Any], default_model: str | None) -> EngineCall:
    """``/v1/embeddings`` is relayed as sent, after the shared wire model's check. ``LLM_MODEL_ID``
    names the chat model, so a body without ``model`` keeps none: the engine serves its one
    embedding model."""
    body = dict(raw)
    _validate(EmbeddingRequest, body)
    return EngineCall(EMBEDDINGS_PATH, body, False)


def normalise_rerank(raw: dict[str, Any], default_model: str | None) -> EngineCall:
    """Rerank (any of its paths) is relayed as sent to the engine's ``/v1/rerank``, after the shared
    wire model's check; like embeddings, a body without ``model`` keeps none."""
    body = dict(raw)
    if not is_tei_rerank(body):  # TEI's body (``texts``): the engine checks it, and answers in TEI's shape
        _validate(RerankRequest, body)
    return EngineCall(RERANK_PATH, body, False)


def normalise_score(raw: dict[str, Any], default_model: str | None) -> EngineCall:
    """vLLM's ``/score``, relayed as sent to the engine's ``/v1/score``."""
    body = dict(raw)
    _validate(ScoreRequest, body)
    return EngineCall(SCORE_PATH, body, False)
