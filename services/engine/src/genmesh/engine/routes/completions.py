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
    new_id,
    now,
)
from genmesh.protocol.asgi import CheckedRoute, unless_disconnected

from ..choices import Reply, collect_all, merged, total_usage, usage_of_results
from ..generation import Beams, Collected, Delta, Event, Finished
from ..logprobs import completion_logprobs
from ..params import check_supported, completion_budget, prompt_limit, sampling_params, text_options
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
    constraint, _ = await output_constraint_off_loop(body, st.grammar_limits)
    st.tokenizer.check_ids(body.stop_token_ids or [], "stop_token_ids")
    ids = await st.tokenizer.completion_ids(body, prompt_limit(st))
    budget = completion_budget(
        body.max_tokens,
        len(ids),
        st.source.context_length,
        st.settings.max_tokens_limit,
        "max_tokens",
        "prompt",
        st.settings.max_prompt_tokens,
    )
    n = body.n or 1
    engine_requests = 1 if (body.best_of or 1) > 1 else n
    choices = [sampling_params(body, budget, constraint, i) for i in range(engine_requests)]
    gens = st.generator.start("completions", ids, choices, text_options(body), arrival)
    echo = _echo_text(st.tokenizer, body, ids) if body.echo else ""
    rid = new_id("cmpl")
    if body.stream:
        stream = _Stream(st.tokenizer, Reply(rid, model, now(), n, len(ids), body.include_usage()), body.logprobs, echo)
        return sse(guarded(stream.chunks(merged(st.generator, gens))))
    results = await unless_disconnected(request, collect_all(st.generator, gens))
    reply = CompletionResponse(
        id=rid,
        created=now(),
        model=model,
        choices=_choices(st.tokenizer, results, body.logprobs, echo),
        usage=usage_of_results(len(ids), results),
    )
    return Response(reply.model_dump_json(), media_type="application/json")


for _path in PATHS:
    router.add_api_route(_path, completions, methods=["POST"], response_model=None)


def _echo_text(tok: PromptTokenizer, body: CompletionRequest, ids: list[int]) -> str:
    prompt = body.single_prompt()
    return prompt if isinstance(prompt, str) else tok.decode(ids)


def _choices(tok: PromptTokenizer, results: list[Collected], top: int | None, echo: str) -> list[CompletionChoice]:
    def logprobs(ids: list[int], lps: list[float]) -> CompletionLogprobs | None:
        return None if top is None else completion_logprobs(tok, ids, lps, top, len(echo))

    if results[0].beams is not None:
        return [
            CompletionChoice(
                index=i,
                text=echo + b.text,
                logprobs=logprobs(b.token_ids, b.logprobs),
                finish_reason=b.finish_reason,  # type: ignore[arg-type]
            )
            for i, b in enumerate(results[0].beams)
        ]
    return [
        CompletionChoice(
            index=i,
            text=echo + r.text,
            logprobs=logprobs(r.token_ids, r.logprobs),
            finish_reason=r.finished.reason,  # type: ignore[arg-type]
        )
        for i, r in enumerate(results)
    ]


class _Stream:
    def __init__(self, tok: PromptTokenizer, reply: Reply, top: int | None, echo: str) -> None:
        self.tok = tok
        self.reply = reply
        self.top = top
        self.echo = echo
        self.offsets = [len(echo)] * reply.n

    def chunk(
        self, index: int, text: str, finish: str | None = None, logprobs: CompletionLogprobs | None = None
    ) -> CompletionResponse:
        choice = CompletionChoice(index=index, text=text, logprobs=logprobs, finish_reason=finish)  # type: ignore[arg-type]
        return CompletionResponse(
            id=self.reply.rid, created=self.reply.created, model=self.reply.model, choices=[choice]
        )

    async def chunks(self, events: AsyncIterator[tuple[int, Event]]) -> AsyncIterator[CompletionResponse]:
        if self.echo:
            for i in range(self.reply.n):
                yield self.chunk(i, self.echo)
        completion_tokens = 0
        async for index, ev in events:
            if isinstance(ev, str):
                yield self.chunk(index, ev)
            elif isinstance(ev, Delta):
                lps = completion_logprobs(self.tok, ev.token_ids, ev.logprobs, self.top or 0, self.offsets[index])
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
