"""``POST /v1/completions`` (and the OVMS ``/v3`` aliases)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    PromptLogprobs,
    new_id,
    now,
)
from genmesh.protocol.server.asgi import CheckedRoute, unless_disconnected
from genmesh.protocol.server.tracing import annotate

from ...client.generation import Beams, Collected, Delta, Event, Finished
from ...client.n_choices import Reply, total_usage, usage_of_results
from ...core.ipc import ScoredToken
from ..intake import Limit, admit, submit
from ..logprobs import completion_logprobs, echoed_prompt_logprobs, merge, vllm_prompt_logprobs
from ..prompt_logprobs import Prompts, ScoringPlan, check_context, score_prompt
from ..prompts import PromptTokenizer
from ..sampling_params import prompt_limit
from ..structured_output import output_constraint_off_loop
from .responding import add_api_route, arrival_time, engine, generated_reply, guarded, json_reply, sse

router = APIRouter(route_class=CheckedRoute)


async def completions(body: CompletionRequest, request: Request) -> Response:
    arrival = arrival_time()
    st = engine(request, body.model)
    model = admit(st, body, "completions")
    constraint, _ = await output_constraint_off_loop(body, st.grammar_limits)
    st.tokenizer.check_ids(body.stop_token_ids or [], "stop_token_ids")
    ids = await st.tokenizer.completion_ids(body, prompt_limit(st))
    scoring = ScoringPlan.of(body, len(ids))
    echo = _echo_text(st.tokenizer, body, ids) if body.echo else ""
    reply = Reply(new_id("cmpl"), model, now(), body.n or 1, len(ids), body.include_usage())
    annotate({"gen_ai.response.id": reply.rid, "gen_ai.request.model": model})
    view = _View(st.tokenizer, body, ids, echo)
    if body.max_tokens == 0:
        check_context(len(ids), prompt_limit(st), "prompt")
        scored = await unless_disconnected(request, score_prompt(st, ids, scoring))
        return _prompt_only(view, reply, bool(body.stream), scored)
    limit = Limit(body.max_tokens, "max_tokens", "prompt")
    gens = submit(st, body, "completions", ids, limit, constraint, arrival)
    return await generated_reply(request, st, ids, scoring, gens, bool(body.stream), _Writer(view, reply))


add_api_route(router, "completions", completions)


def _echo_text(tok: PromptTokenizer, body: CompletionRequest, ids: list[int]) -> str:
    prompt = body.single_prompt()
    return prompt if isinstance(prompt, str) else tok.decode(ids)


class _View:
    """How one request's tokens become its choices' text and logprobs."""

    def __init__(self, tok: PromptTokenizer, body: CompletionRequest, ids: list[int], echo: str) -> None:
        self.tok = tok
        self.top = body.logprobs
        self.echo = echo
        self.ids = ids
        self.prompt_top = body.prompt_logprobs

    def logprobs(
        self, ids: list[int], lps: list[float], scored: list[ScoredToken] | None, offset: int
    ) -> CompletionLogprobs | None:
        if self.top is None:
            return None
        return completion_logprobs(self.tok, ids, lps, self.top, offset, scored or None)

    def prompt_part(self, scored: list[ScoredToken] | None) -> CompletionLogprobs | None:
        """The echoed prompt's logprobs (``echo`` with ``logprobs``)."""
        if self.top is None or not self.echo or scored is None:
            return None
        return echoed_prompt_logprobs(self.tok, self.ids, scored, self.top)

    def vllm_prompt(self, scored: list[ScoredToken] | None) -> PromptLogprobs | None:
        if self.prompt_top is None or scored is None:
            return None
        return vllm_prompt_logprobs(self.tok, scored, self.prompt_top)

    def choice(
        self,
        index: int,
        text: str,
        reason: str | None,
        gen: CompletionLogprobs | None,
        prompt: list[ScoredToken] | None,
        with_prompt: bool = True,
    ) -> CompletionChoice:
        echoed = self.prompt_part(prompt) if with_prompt else None
        logprobs = merge(echoed, gen or CompletionLogprobs()) if echoed is not None else gen
        return CompletionChoice(
            index=index,
            text=(self.echo if with_prompt else "") + text,
            logprobs=logprobs,
            finish_reason=reason,  # type: ignore[arg-type]
            prompt_logprobs=self.vllm_prompt(prompt) if with_prompt else None,
        )


def _prompt_only(view: _View, reply: Reply, stream: bool, scored: list[ScoredToken]) -> Response:
    """``max_tokens`` 0 with ``echo``: the prompt, scored, and nothing generated."""
    choices = [view.choice(i, "", "length", None, scored) for i in range(reply.n)]
    if stream:

        async def chunks() -> AsyncIterator[CompletionResponse]:
            for c in choices:
                yield reply.chunk(CompletionResponse, [c])
            if reply.include_usage:
                yield reply.usage_chunk(CompletionResponse, 0)

        return sse(guarded(chunks()))
    return json_reply(reply.chunk(CompletionResponse, choices, total_usage(reply.prompt_tokens, 0)))


def _choices(view: _View, results: list[Collected], prompts: list[list[ScoredToken] | None]) -> list[CompletionChoice]:
    offset = len(view.echo)
    if results[0].beams is not None:
        return [
            view.choice(i, b.text, b.finish_reason, view.logprobs(b.token_ids, b.logprobs, None, offset), None)
            for i, b in enumerate(results[0].beams)
        ]
    return [
        view.choice(i, r.text, r.finished.reason, view.logprobs(r.token_ids, r.logprobs, r.scored, offset), prompts[i])
        for i, r in enumerate(results)
    ]


class _Writer:
    def __init__(self, view: _View, reply: Reply) -> None:
        self.view = view
        self.reply = reply
        self.offsets = [len(view.echo)] * reply.n

    def whole(self, results: list[Collected], prompts: Prompts) -> CompletionResponse:
        choices = _choices(self.view, results, prompts)
        usage = usage_of_results(self.reply.prompt_tokens, results)
        return CompletionResponse(
            id=self.reply.rid, created=now(), model=self.reply.model, choices=choices, usage=usage
        )

    def chunk(
        self, index: int, text: str, finish: str | None = None, logprobs: CompletionLogprobs | None = None
    ) -> CompletionResponse:
        choice = CompletionChoice(index=index, text=text, logprobs=logprobs, finish_reason=finish)  # type: ignore[arg-type]
        return self.reply.chunk(CompletionResponse, [choice])

    async def chunks(
        self, events: AsyncIterator[tuple[int, Event]], prompts: Prompts
    ) -> AsyncIterator[CompletionResponse]:
        view = self.view
        if view.echo or view.prompt_top is not None:
            for i in range(self.reply.n):
                yield self.reply.chunk(CompletionResponse, [view.choice(i, "", None, None, prompts[i])])
        completion_tokens = 0
        async for index, ev in events:
            if isinstance(ev, str):
                yield self.chunk(index, ev)
            elif isinstance(ev, Delta):
                lps = completion_logprobs(
                    view.tok, ev.token_ids, ev.logprobs, view.top or 0, self.offsets[index], ev.scored
                )
                self.offsets[index] += sum(len(t) for t in lps.tokens)
                yield self.chunk(index, ev.text, logprobs=lps)
            elif isinstance(ev, Finished):
                completion_tokens += ev.completion_tokens
                yield self.chunk(index, "", ev.reason)
            elif isinstance(ev, Beams):  # pragma: no cover - best_of with stream is refused
                continue
        if self.reply.include_usage:
            yield self.reply.usage_chunk(CompletionResponse, completion_tokens)
