"""``/v1/completions``: request, response and stream chunk."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from .common import FinishReason, Usage
from .sampling import SamplingFields

Prompt = str | list[str] | list[int] | list[list[int]]


class CompletionRequest(SamplingFields):
    prompt: Prompt
    # OpenAI's default for the legacy completions endpoint.
    max_tokens: int | None = Field(default=16, ge=1)
    echo: bool | None = False
    logprobs: int | None = Field(default=None, ge=0, le=5)
    suffix: str | None = None


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: Any | None = None
    finish_reason: FinishReason | None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
