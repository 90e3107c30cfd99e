"""Which OpenAI parameters this engine honours, and their translation into ``SamplingParams``.

A parameter the engine does not honour yet is refused with a 400 naming it, unless it was
sent with a value that changes nothing (``n: 1``, ``logprobs: false``, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from genmesh.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    SamplingFields,
    invalid_request,
    neutral,
    unsupported_parameter,
)

from ..client.output_processor import TextOptions
from ..core.ipc import Constraint, SamplingParams

if TYPE_CHECKING:
    from ..settings import EngineSettings
    from .loaded_model import EngineState

# Parameters not honoured, with the value that means "not used".
_NEUTRAL: dict[str, Any] = {
    "logit_bias": {},
    "suffix": "",
    "functions": [],
    "function_call": "none",
    "service_tier": "auto",
    "reasoning_effort": None,
    "modalities": ["text"],
    "prediction": None,
    "audio": None,
    "web_search_options": None,
    "assistant_confidence_threshold": None,  # speculative decoding with a draft model: none here
}
_LOOKUP = ("num_assistant_tokens", "max_ngram_size")
# Accepted and ignored on purpose: they do not change the generated text.
_ACCEPTED_NOOP = {"user", "store", "metadata", "parallel_tool_calls", "add_generation_prompt"}


def check_supported(req: SamplingFields, best_of_limit: int) -> None:
    """A 400 naming the first parameter this engine cannot honour with the value sent."""
    for name in sorted(req.model_fields_set):
        if name in _ACCEPTED_NOOP or name not in _NEUTRAL:
            continue
        value = getattr(req, name)
        if not neutral(value, _NEUTRAL[name]):
            raise unsupported_parameter(name, f"got {value!r}")
    n = req.n or 1
    if n > best_of_limit:
        raise invalid_request(f"'n' is {n}, above this server's limit of {best_of_limit}", param="n")
    if req.best_of is not None and req.best_of > 1:
        if req.best_of > best_of_limit:
            raise invalid_request(
                f"'best_of' is {req.best_of}, above this server's limit of {best_of_limit}", param="best_of"
            )
        if req.best_of < n:
            raise invalid_request(f"'best_of' ({req.best_of}) must be at least 'n' ({n})", param="best_of")
        if req.stream:
            raise invalid_request("'best_of' (beam search) cannot be used with streaming", param="best_of")


def check_prompt_lookup(req: SamplingFields, settings: EngineSettings) -> None:
    """A 400 for prompt-lookup parameters this engine cannot take: either one on an engine without prompt
    lookup; on one with it, beam search, or a value above ``--prompt-lookup-limit``."""
    asked = {name: value for name in _LOOKUP if (value := getattr(req, name)) is not None}
    if not settings.uses_assistant:
        if asked:
            name = next(iter(asked))
            raise invalid_request(f"'{name}' needs an engine started with --prompt-lookup or --draft-model", param=name)
        return
    if settings.draft_model is not None and "max_ngram_size" in asked:
        raise invalid_request(
            "'max_ngram_size' is prompt lookup's; this engine drafts with a model", param="max_ngram_size"
        )
    if (req.best_of or 1) > 1:
        kind = "a draft model" if settings.draft_model is not None else "prompt lookup"
        raise invalid_request(f"'best_of' (beam search) cannot be used on an engine with {kind}", param="best_of")
    if settings.draft_model is not None and (req.temperature is None or req.temperature > 0):
        # OpenVINO GenAI 2026.4's sampled speculative decoding does not keep the model's distribution
        # (its acceptance test compares the draft's probability of its token with the model's probability
        # of another token): against the model's own probabilities a chi-square p of 1e-8 or less, where
        # the engine without a draft passes (docs/qwen.md). It also fails its first sampled step with
        # the prefix cache on, and a drafting pipeline refuses requests that do not draft. The served model
        # is the model, so a drafting engine serves greedy requests (tests/engine/server/test_speculative.py).
        raise invalid_request(
            "this engine drafts with a draft model (speculative decoding), which serves greedy requests only "
            "(OpenVINO GenAI's sampled speculative decoding changes the model's distribution): send "
            "'temperature': 0 (OpenAI's default is 1), or use an engine without --draft-model",
            param="temperature",
        )
    for name, value in asked.items():
        if value > settings.prompt_lookup_limit:
            limit = settings.prompt_lookup_limit
            raise invalid_request(f"'{name}' is {value}, above this server's limit of {limit}", param=name)


def prompt_lookup(req: SamplingFields, settings: EngineSettings) -> tuple[int, int]:
    """``num_assistant_tokens`` and ``max_ngram_size`` of one checked request (:func:`check_prompt_lookup`):
    the request's, else the engine's defaults; (0, 0) on an engine without prompt lookup."""
    if not settings.uses_assistant:
        return 0, 0
    defaults = settings.request_lookup
    if settings.draft_model is not None:
        return req.num_assistant_tokens or defaults[0], 0
    return req.num_assistant_tokens or defaults[0], req.max_ngram_size or defaults[1]


def prompt_limit(st: EngineState) -> int:
    """The most prompt tokens a request may have: the context, or ``--max-prompt-tokens`` if lower."""
    limit = st.source.context_length
    if st.settings.max_prompt_tokens is not None:
        limit = min(limit, st.settings.max_prompt_tokens)
    return limit


def wants_logprobs(req: ChatCompletionRequest | CompletionRequest) -> bool:
    if isinstance(req, ChatCompletionRequest):
        return bool(req.logprobs)
    return req.logprobs is not None


def completion_budget(
    requested: int | None,
    prompt_tokens: int,
    context_length: int,
    max_tokens_limit: int | None,
    limit_param: str,
    prompt_param: str,
    max_prompt_tokens: int | None = None,
) -> int:
    """How many tokens to generate; a 400 when the request cannot fit."""
    if max_prompt_tokens is not None and prompt_tokens > max_prompt_tokens:
        raise invalid_request(
            f"The prompt has {prompt_tokens} tokens, above this server's limit of {max_prompt_tokens}.",
            param=prompt_param,
            code="context_length_exceeded",
        )
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


def sampling_params(
    req: ChatCompletionRequest | CompletionRequest,
    max_new_tokens: int,
    constraint: Constraint | None = None,
    choice: int = 0,
    lookup: tuple[int, int] = (0, 0),
) -> SamplingParams:
    """The engine parameters of one choice (``choice`` shifts the seed so ``n`` samples differ)."""
    temperature = 1.0 if req.temperature is None else req.temperature
    top_k = req.top_k if req.top_k is not None and req.top_k > 0 else 0
    best_of = req.best_of or 1
    # The engine's seed is unsigned 64-bit; the request's is signed (vLLM's range): wrap it.
    seed = None if req.seed is None else (req.seed + choice) % 2**64
    return SamplingParams(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=top_k,
        min_p=req.min_p or 0.0,
        seed=seed,
        ignore_eos=bool(req.ignore_eos),
        min_new_tokens=min(req.min_tokens or 0, max_new_tokens),
        repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
        frequency_penalty=req.frequency_penalty or 0.0,
        presence_penalty=req.presence_penalty or 0.0,
        stop_token_ids=list(req.stop_token_ids or []),
        logprobs=wants_logprobs(req),
        num_beams=best_of,
        num_return_sequences=(req.n or 1) if best_of > 1 else 1,
        length_penalty=1.0 if req.length_penalty is None else req.length_penalty,
        constraint=constraint,
        num_assistant_tokens=lookup[0],
        max_ngram_size=lookup[1],
    )


def text_options(req: ChatCompletionRequest | CompletionRequest) -> TextOptions:
    return TextOptions(
        stops=req.stop_list(),
        include_stop_str_in_output=bool(req.include_stop_str_in_output),
        skip_special_tokens=req.skip_special_tokens is not False,
    )
