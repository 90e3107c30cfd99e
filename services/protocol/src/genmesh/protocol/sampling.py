"""Sampling fields common to /v1/chat/completions and /v1/completions.

Every parameter that OpenAI, vLLM or OpenVINO Model Server define is declared here, so a
request that uses one is understood (and accepted or refused by name by the engine), and a
key that none of them define is refused as unrecognised.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .common import INT32_MAX, Seed, StreamOptions, TokenId
from .structured import GuidedFields


class SamplingFields(GuidedFields):
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=INT32_MAX)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1, le=INT32_MAX)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: Seed | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[TokenId] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=1, ge=1, le=INT32_MAX)
    best_of: int | None = Field(default=None, ge=1, le=INT32_MAX)
    ignore_eos: bool | None = False
    min_tokens: int | None = Field(default=None, ge=0, le=INT32_MAX)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    length_penalty: float | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    logit_bias: dict[str, float] | None = None
    # vLLM: the log-probability of every prompt token, with this many most likely tokens at each position.
    prompt_logprobs: int | None = Field(default=None, ge=0)
    user: str | None = None
    # OpenVINO Model Server: prompt-lookup decoding (draft tokens per step, longest n-gram matched in the
    # prompt), and speculative decoding's acceptance threshold (with a draft model).
    num_assistant_tokens: int | None = Field(default=None, ge=1, le=INT32_MAX)
    max_ngram_size: int | None = Field(default=None, ge=1, le=INT32_MAX)
    assistant_confidence_threshold: float | None = Field(default=None, ge=0.0, le=1.0)

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


def neutral(value: Any, default: Any) -> bool:
    """True when a parameter was sent with a value that changes nothing."""
    if value is None:
        return True
    if isinstance(value, (list, dict)) and not value:
        return True
    return bool(value == default)
