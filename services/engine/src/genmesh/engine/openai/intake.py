"""A generation request's way into the engine, one path for every endpoint kind.

``admit`` does the checks every kind starts with (model, ``user``, parameters, logprobs);
``submit`` fits the token budget and starts one engine request per choice. Between them each kind
tokenises its own input: ``start_chat`` (``/v1/chat/completions`` and ``/v1/responses``) plans
the tools, builds the structured-output constraint and applies the chat template;
``/v1/completions`` tokenises its prompt (``routes/completions.py``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from genmesh.protocol import ChatCompletionRequest, CompletionRequest, invalid_request

from ..client.generation import Generation
from ..client.scoring_client import check_logprob_request
from ..core.ipc import Constraint
from . import tools
from .continue_final_message import check_continue
from .loaded_model import EngineState
from .sampling_params import (
    check_prompt_lookup,
    check_supported,
    completion_budget,
    prompt_limit,
    prompt_lookup,
    sampling_params,
    text_options,
)
from .structured_output import output_constraint_off_loop

# The HTTP side's log, as the routes' (an audit line per request with a ``user``).
log = logging.getLogger("genmesh.engine.http")

Body = ChatCompletionRequest | CompletionRequest


@dataclass(frozen=True)
class ChatJob:
    model: str
    plan: tools.ToolPlan | None
    prompt_ids: list[int]
    gens: list[Generation]
    n: int


def log_user(user: str | None, endpoint: str, model: str) -> None:
    """OpenAI's ``user`` does not change the reply; it is logged (with the request id) for audits."""
    if user:
        log.info("request from user %r", user, extra={"user": user, "endpoint": endpoint, "model": model})


def admit(st: EngineState, body: Body, endpoint: str) -> str:
    """The served model's name, once the request's model and parameters are checked (else a 4xx)."""
    model = st.check_model(body.model)
    log_user(body.user, endpoint, model)
    check_supported(body, st.settings.best_of_limit)
    check_prompt_lookup(body, st.settings)
    check_logprob_request(body, st.settings.max_logprobs)
    return model


@dataclass(frozen=True)
class Limit:
    """The completion's token limit as requested, and the parameters a 400 about it names."""

    requested: int | None
    param: str
    prompt_param: str


def submit(
    st: EngineState,
    body: Body,
    endpoint: str,
    ids: list[int],
    limit: Limit,
    constraint: Constraint | None,
    arrival: float,
) -> list[Generation]:
    """Fit the token budget and start the generations: one, or one per choice (``n``)."""
    budget = completion_budget(
        limit.requested,
        len(ids),
        st.source.context_length,
        st.settings.max_tokens_limit,
        limit.param,
        limit.prompt_param,
        st.settings.max_prompt_tokens,
    )
    engine_requests = 1 if (body.best_of or 1) > 1 else body.n or 1
    lookup = prompt_lookup(body, st.settings)
    choices = [sampling_params(body, budget, constraint, i, lookup) for i in range(engine_requests)]
    return st.generator.start(endpoint, ids, choices, text_options(body), arrival)


async def start_chat(st: EngineState, body: ChatCompletionRequest, endpoint: str, arrival: float) -> ChatJob:
    model = admit(st, body, endpoint)
    limits = st.grammar_limits
    settings = st.settings
    plan = tools.plan_tools(
        body, st.tokenizer.chat_template, limits, settings.tool_call_parser, settings.enable_auto_tool_choice
    )
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
    chat_limit = Limit(body.completion_limit(), limit_param, "messages")
    gens = submit(st, body, endpoint, ids, chat_limit, constraint, arrival)
    return ChatJob(model, plan, ids, gens, body.n or 1)
