"""Starting a chat generation: what ``/v1/chat/completions`` and ``/v1/responses`` share.

Checks the parameters, plans the tools, builds the structured-output constraint, applies the chat
template, tokenises, fits the token budget and submits one engine request per choice.
"""

from __future__ import annotations

from dataclasses import dataclass

from genmesh.protocol import ChatCompletionRequest, invalid_request

from . import tools
from .generation import Generation
from .params import check_supported, completion_budget, prompt_limit, sampling_params, text_options
from .prefill import check_continue
from .routes.responding import log_user
from .scoring import check_logprob_request
from .state import EngineState
from .structured import output_constraint_off_loop


@dataclass(frozen=True)
class ChatJob:
    model: str
    plan: tools.ToolPlan | None
    prompt_ids: list[int]
    gens: list[Generation]
    n: int


async def start_chat(st: EngineState, body: ChatCompletionRequest, endpoint: str, arrival: float) -> ChatJob:
    model = st.check_model(body.model)
    log_user(body.user, endpoint, model)
    check_supported(body, st.settings.best_of_limit)
    check_logprob_request(body, st.settings.max_logprobs)
    limits = st.grammar_limits
    plan = tools.plan_tools(body, st.tokenizer.chat_template, limits)
    constraint, source = await output_constraint_off_loop(body, limits)
    if plan is not None and source is not None:
        raise invalid_request(f"use either 'tools' or '{source}', not both", param=source)
    if plan is not None:
        constraint = plan.constraint
    limit = prompt_limit(st)
    st.tokenizer.check_ids(body.stop_token_ids or [], "stop_token_ids")
    check_continue(body)
    ids = await st.tokenizer.chat_ids(
        body.messages,
        body.add_generation_prompt is not False,
        plan,
        body.chat_template_kwargs,
        limit,
        continue_final=bool(body.continue_final_message),
    )
    limit_param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    budget = completion_budget(
        body.completion_limit(),
        len(ids),
        st.source.context_length,
        st.settings.max_tokens_limit,
        limit_param,
        "messages",
        st.settings.max_prompt_tokens,
    )
    n = body.n or 1
    engine_requests = 1 if (body.best_of or 1) > 1 else n
    choices = [sampling_params(body, budget, constraint, i) for i in range(engine_requests)]
    gens = st.generator.start(endpoint, ids, choices, text_options(body), arrival)
    return ChatJob(model, plan, ids, gens, n)
