"""Pieces shared by the chat and completion wire models."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

# Integer fields have ranges, so a number no engine type holds (past 64 bits, or a token id past
# 32) is a 400 naming the field, never an overflow inside a service.
INT32_MAX = 2**31 - 1
Count = Annotated[int, Field(le=INT32_MAX)]
TokenId = Annotated[int, Field(ge=0, le=INT32_MAX)]
Seed = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]

# The request fields that bound a reply's output tokens, first the one that wins: chat's
# max_completion_tokens over its deprecated max_tokens (completions' only one), the Responses API's
# max_output_tokens, and OPEA's max_new_tokens (the microservice renames it to max_tokens).
OUTPUT_TOKEN_LIMITS = ("max_completion_tokens", "max_tokens", "max_output_tokens", "max_new_tokens")


def output_token_limit(body: Mapping[str, Any]) -> int | None:
    """The output-token bound a raw request body asks for (the first of ``OUTPUT_TOKEN_LIMITS`` that
    is a positive integer), or None."""
    for name in OUTPUT_TOKEN_LIMITS:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class StrictRequest(BaseModel):
    """A request body: unknown keys are an error (OpenAI answers 400), never silently ignored."""

    model_config = ConfigDict(extra="forbid")


class StreamOptions(StrictRequest):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ModelCard(BaseModel):
    """A served model. Extra keys pass through (an audio model says its ``kind`` and ``voices``)."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "genmesh"
    max_model_len: int | None = None
    # genmesh: what the model serves (chat: chat/completions; embeddings: embeddings and, as a
    # cosine scorer, rerank/score; rerank: a cross-encoder's rerank/score; transcription, speech: audio)
    kind: Literal["chat", "embeddings", "rerank", "transcription", "speech"] | None = None
    # genmesh's engine: OVMS's state of the model (AVAILABLE, LOADING, ...) and, when it does not serve,
    # why (a model that failed to load is skipped while the others serve: docs/engine.md)
    state: str | None = None
    reason: str | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard] = Field(default_factory=list)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "abort", "error"]


class PromptLogprob(BaseModel):
    """vLLM's ``prompt_logprobs`` entry: one token at one prompt position (1: the most likely)."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


# vLLM's ``prompt_logprobs``: per prompt position (the first is null), token id (as a string) -> entry.
PromptLogprobs = list[dict[str, PromptLogprob] | None]

ChoiceT = TypeVar("ChoiceT", bound=BaseModel)


class CompletionEnvelope(BaseModel, Generic[ChoiceT]):
    """What every chat and text completion (and stream chunk) carries around its choices.

    A subclass names its ``object`` and may make ``usage`` required; the field order (and so the
    JSON written) is this one, the subclass's own fields after it.
    """

    id: str
    object: str
    created: int
    model: str
    choices: list[ChoiceT]
    usage: Usage | None = None
    system_fingerprint: str | None = None
