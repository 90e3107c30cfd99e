"""Replies that need the scorer: prompt log-probabilities (``echo`` with ``logprobs``, vLLM's
``prompt_logprobs``) and true top-k of generated tokens, unary and streamed.

Each engine request (choice) of such a reply gets a scoring session over the prompt; its
generated tokens are appended as they come (``scoring_client.with_top``), so a streamed chunk carries
the top-k of its own tokens.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from genmesh.protocol import ChatCompletionRequest, CompletionRequest, invalid_request

from ..client.generation import Collected, Event, Generation
from ..client.n_choices import collect_all, merged
from ..client.scoring_client import ScoreSession, top_k, with_top
from ..core.ipc import ScoredToken
from .loaded_model import EngineState

T = TypeVar("T")
Prompts = list[list[ScoredToken] | None]


@dataclass(frozen=True)
class ScoringPlan:
    prompt: bool  # report every prompt position
    prompt_top: int  # most likely tokens per prompt position
    top: int  # most likely tokens per generated position (0: the pipeline's own logprob is enough)

    @classmethod
    def of(cls, req: ChatCompletionRequest | CompletionRequest, prompt_tokens: int) -> ScoringPlan:
        echo_lp = isinstance(req, CompletionRequest) and bool(req.echo) and req.logprobs is not None
        prompt_top = max(req.prompt_logprobs or 0, (req.logprobs or 0) if echo_lp else 0)
        wants_prompt = (echo_lp or req.prompt_logprobs is not None) and prompt_tokens > 0
        return cls(wants_prompt, prompt_top, top_k(req))

    @property
    def needed(self) -> bool:
        return self.prompt or self.top > 0

    @property
    def session_top(self) -> int:
        return max(self.prompt_top, self.top)


def check_context(prompt_tokens: int, context_length: int, param: str) -> None:
    if prompt_tokens > context_length:
        raise invalid_request(
            f"This model's maximum context length is {context_length} tokens. However, your prompt has "
            f"{prompt_tokens} tokens. Please reduce the length of the prompt.",
            param=param,
            code="context_length_exceeded",
        )


async def score_prompt(st: EngineState, ids: list[int], plan: ScoringPlan) -> list[ScoredToken]:
    """Every prompt position but the first, scored (no generation)."""
    async with st.scoring.session(ids, plan.session_top, 1, keep=False) as session:
        return await session.take(len(ids) - 1)


async def _open(
    stack: contextlib.AsyncExitStack, st: EngineState, ids: list[int], plan: ScoringPlan, count: int
) -> tuple[list[ScoreSession], Prompts]:
    if count > st.settings.max_num_scoring_seqs:
        raise invalid_request(
            f"{count} choices with logprobs need {count} scoring sessions; this server runs "
            f"{st.settings.max_num_scoring_seqs} at once",
            param="n",
        )
    report_from = 1 if plan.prompt else len(ids)
    sessions = [
        await stack.enter_async_context(st.scoring.session(ids, plan.session_top, report_from, keep=plan.top > 0))
        for _ in range(count)
    ]
    prompts: Prompts = [await s.take(len(ids) - 1) if plan.prompt else None for s in sessions]
    return sessions, prompts


def _wrap(gens: Sequence[Generation], sessions: list[ScoreSession], plan: ScoringPlan) -> list[Generation]:
    if plan.top <= 0:
        return list(gens)
    return [Generation(g.request_id, with_top(g.events, s)) for g, s in zip(gens, sessions, strict=True)]


async def scored_results(
    st: EngineState, ids: list[int], plan: ScoringPlan, gens: Sequence[Generation]
) -> tuple[list[Collected], Prompts]:
    """Every choice collected, with its scored prompt (when asked for) and scored tokens."""
    if not plan.needed:
        return await collect_all(st.generator, gens), [None] * len(gens)
    try:
        async with contextlib.AsyncExitStack() as stack:
            sessions, prompts = await _open(stack, st, ids, plan, len(gens))
            return await collect_all(st.generator, _wrap(gens, sessions, plan)), prompts
    finally:
        st.generator.abort(gens)


async def scored_stream(
    st: EngineState,
    ids: list[int],
    plan: ScoringPlan,
    gens: Sequence[Generation],
    chunks: Callable[[AsyncIterator[tuple[int, Event]], Prompts], AsyncIterator[T]],
) -> AsyncIterator[T]:
    """A streamed reply's chunks, its sessions open for as long as it streams."""
    try:
        async with contextlib.AsyncExitStack() as stack:
            sessions, prompts = (
                await _open(stack, st, ids, plan, len(gens)) if plan.needed else ([], [None] * len(gens))
            )
            async for chunk in chunks(merged(st.generator, _wrap(gens, sessions, plan)), prompts):
                yield chunk
    finally:
        st.generator.abort(gens)
