"""``/v1/completions``: request, response and stream chunk."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .common import INT32_MAX, CompletionEnvelope, FinishReason, PromptLogprobs, TokenId
from .sampling import SamplingFields

Prompt = str | list[str] | list[TokenId] | list[list[TokenId]]


class CompletionRequest(SamplingFields):
    prompt: Prompt
    # OpenAI's default for the legacy completions endpoint; 0 (with ``echo``) scores the prompt only.
    max_tokens: int | None = Field(default=16, ge=0, le=INT32_MAX)
    echo: bool | None = False
    # OpenAI allows 0..5, vLLM up to its max_logprobs (20): the server states its own cap.
    logprobs: int | None = Field(default=None, ge=0, le=INT32_MAX)
    suffix: str | None = None

    def single_prompt(self) -> Prompt:
        """The prompt, unwrapped when it is a batch of one (``["text"]`` or ``[[ids]]``)."""
        prompt = self.prompt
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            return prompt[0]
        return prompt


class CompletionLogprobs(BaseModel):
    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReason | None = None
    prompt_logprobs: PromptLogprobs | None = None


class CompletionResponse(CompletionEnvelope[CompletionChoice]):
    object: Literal["text_completion"] = "text_completion"
