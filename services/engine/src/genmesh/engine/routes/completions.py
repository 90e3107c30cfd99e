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

from ..choices import Reply, total_usage, usage_of_results
from ..generation import Beams, Collected, Delta, Event, Finished
from ..logprobs import completion_logprobs, echoed_prompt_logprobs, merge, vllm_prompt_logprobs
from ..messages import ScoredToken
from ..params import check_supported, completion_budget, prompt_limit, sampling_params, text_options
from ..scored_replies import ScoringPlan, check_context, score_prompt, scored_results, scored_stream
from ..scoring import check_logprob_request
from ..structured import output_constraint_off_loop
from ..tokenizer import PromptTokenizer
from .responding import arrival_time, engine, guarded, log_user, sse

router = APIRouter(route_class=CheckedRoute)

PATHS = ("/v1/completions", "/v3/completions", "/v3/v1/completions")


async def completions(body: CompletionRequest, request: Request) -> Response:
    arrival = arrival_time()
    st = engine(request, body.model)
    model = st.check_model(body.model)
    log_user(body.user, "completions", model)
    check_supported(body, st.settings.best_of_limit)
    check_logprob_request(body, st.settings.max_logprobs)
    constraint, _ = await output_constraint_off_loop(body, st.grammar_limits)
    st.tokenizer.check_ids(body.stop_token_ids or [], "stop_token_ids")
    ids = await st.tokenizer.completion_ids(body, prompt_limit(st))
    plan = ScoringPlan.of(body, len(ids))
    echo = _echo_text(st.tokenizer, body, ids) if body.echo else ""
    rid = new_id("cmpl")
    n = body.n or 1
    reply = Reply(rid, model, now(), n, len(ids), body.include_usage())
    if body.max_tokens == 0:
        check_context(len(ids), prompt_limit(st), "prompt")
        scored = await unless_disconnected(request, score_prompt(st, ids, plan))
        return _prompt_only(st.tokenizer, reply, body, ids, echo, scored)
    budget = completion_budget(
        body.max_tokens,
        len(ids),
        st.source.context_length,
        st.settings.max_tokens_limit,
        "max_tokens",
        "prompt",
        st.settings.max_prompt_tokens,
    )
    engine_requests = 1 if (body.best_of or 1) > 1 else n
    choices = [sampling_params(body, budget, constraint, i) for i in range(engine_requests)]
    gens = st.generator.start("completions", ids, choices, text_options(body), arrival)
    view = _View(st.tokenizer, body, ids, echo)
    if body.stream:
        stream = _Stream(view, reply)
        return sse(guarded(scored_stream(st, ids, plan, gens, stream.chunks)))
    results, prompts = await unless_disconnected(request, scored_results(st, ids, plan, gens))
    out = CompletionResponse(
        id=rid,
        created=now(),
        model=model,
        choices=_choices(view, results, prompts),
        usage=usage_of_results(len(ids), results),
    )
    return Response(out.model_dump_json(), media_type="application/json")


for _path in PATHS:
    router.add_api_route(_path, completions, methods=["POST"], response_model=None)


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


def _prompt_only(
    tok: PromptTokenizer,
    reply: Reply,
    body: CompletionRequest,
    ids: list[int],
    echo: str,
    scored: list[ScoredToken],
) -> Response:
    """``max_tokens`` 0 with ``echo``: the prompt, scored, and nothing generated."""
    view = _View(tok, body, ids, echo)
    choices = [view.choice(i, "", "length", None, scored) for i in range(reply.n)]
    usage = total_usage(len(ids), 0)
    if body.stream:

        async def chunks() -> AsyncIterator[CompletionResponse]:
            for c in choices:
                yield CompletionResponse(id=reply.rid, created=reply.created, model=reply.model, choices=[c])
            if reply.include_usage:
                yield CompletionResponse(
                    id=reply.rid, created=reply.created, model=reply.model, choices=[], usage=usage
                )

        return sse(guarded(chunks()))
    out = CompletionResponse(id=reply.rid, created=reply.created, model=reply.model, choices=choices, usage=usage)
    return Response(out.model_dump_json(), media_type="application/json")


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


class _Stream:
    def __init__(self, view: _View, reply: Reply) -> None:
        self.view = view
        self.reply = reply
        self.offsets = [len(view.echo)] * reply.n

    def chunk(
        self, index: int, text: str, finish: str | None = None, logprobs: CompletionLogprobs | None = None
    ) -> CompletionResponse:
        choice = CompletionChoice(index=index, text=text, logprobs=logprobs, finish_reason=finish)  # type: ignore[arg-type]
        return CompletionResponse(
            id=self.reply.rid, created=self.reply.created, model=self.reply.model, choices=[choice]
        )

    async def chunks(
        self, events: AsyncIterator[tuple[int, Event]], prompts: list[list[ScoredToken] | None]
    ) -> AsyncIterator[CompletionResponse]:
        view = self.view
        if view.echo or view.prompt_top is not None:
            for i in range(self.reply.n):
                c = view.choice(i, "", None, None, prompts[i])
                yield CompletionResponse(
                    id=self.reply.rid, created=self.reply.created, model=self.reply.model, choices=[c]
                )
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
            usage = total_usage(self.reply.prompt_tokens, completion_tokens)
            yield CompletionResponse(
                id=self.reply.rid, created=self.reply.created, model=self.reply.model, choices=[], usage=usage
            )
