"""Which OpenAI parameters this engine honours, and their translation into ``SamplingParams``.

A parameter the engine does not honour yet is refused with a 400 naming it, unless it was
sent with a value that changes nothing (``n: 1``, ``logprobs: false``, ...).
"""

from __future__ import annotations

from typing import Any

from genmesh.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    SamplingFields,
    invalid_request,
    neutral,
    unsupported_parameter,
)

from .messages import SamplingParams

# Parameters not honoured yet, with the value that means "not used".
_NEUTRAL: dict[str, Any] = {
    "n": 1,
    "best_of": 1,
    "min_p": 0.0,
    "min_tokens": 0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "length_penalty": 1.0,
    "include_stop_str_in_output": False,
    "skip_special_tokens": True,
    "logit_bias": {},
    "stop_token_ids": [],
    "logprobs": False,
    "top_logprobs": 0,
    "response_format": None,
    "tools": [],
    "tool_choice": "none",
    "functions": [],
    "function_call": "none",
    "chat_template_kwargs": {},
    "echo": False,
    "suffix": "",
    "service_tier": "auto",
    "reasoning_effort": None,
    "modalities": ["text"],
    "prediction": None,
    "audio": None,
    "web_search_options": None,
}
# Accepted and ignored on purpose: they do not change the generated text.
_ACCEPTED_NOOP = {"user", "store", "metadata", "parallel_tool_calls", "add_generation_prompt"}


def check_supported(req: SamplingFields) -> None:
    for name in sorted(req.model_fields_set):
        if name in _ACCEPTED_NOOP or name not in _NEUTRAL:
            continue
        value = getattr(req, name)
        if name == "response_format" and isinstance(value, dict) and value.get("type") == "text":
            continue
        if name == "logprobs" and isinstance(req, CompletionRequest) and value in (None, 0):
            continue
        if not neutral(value, _NEUTRAL[name]):
            raise unsupported_parameter(name, f"got {value!r}")


def completion_budget(
    requested: int | None,
    prompt_tokens: int,
    context_length: int,
    max_tokens_limit: int | None,
    limit_param: str,
    prompt_param: str,
) -> int:
    """How many tokens to generate; a 400 when the request cannot fit."""
    room = context_length - prompt_tokens
    if room <= 0:
        raise invalid_request(
            f"This model's maximum context length is {context_length} tokens. However, your "
            f"prompt has {prompt_tokens} tokens. Please reduce the length of the prompt.",
            param=prompt_param,
            code="context_length_exceeded",
        )
    name = limit_param
    if requested is not None and max_tokens_limit is not None and requested > max_tokens_limit:
        raise invalid_request(
            f"'{name}' is {requested}, above this server's limit of {max_tokens_limit}",
            param=name,
        )
    if requested is not None and requested > room:
        raise invalid_request(
            f"This model's maximum context length is {context_length} tokens. However, you "
            f"requested {prompt_tokens + requested} tokens ({prompt_tokens} in the prompt, "
            f"{requested} for the completion). Please reduce the prompt or '{name}'.",
            param=name,
            code="context_length_exceeded",
        )
    budget = requested if requested is not None else room
    if max_tokens_limit is not None:
        budget = min(budget, max_tokens_limit)
    return budget


def sampling_params(req: ChatCompletionRequest | CompletionRequest, max_new_tokens: int) -> SamplingParams:
    temperature = 1.0 if req.temperature is None else req.temperature
    top_k = req.top_k if req.top_k is not None and req.top_k > 0 else 0
    return SamplingParams(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=top_k,
        seed=req.seed,
        ignore_eos=bool(req.ignore_eos),
    )
