"""``POST /v1/chat/completions`` (and the OVMS ``/v3`` aliases)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    ChoiceLogprobs,
    ToolCall,
    ToolCallDelta,
    new_id,
    now,
)
from genmesh.protocol.server.asgi import CheckedRoute, unless_disconnected

from .. import tools
from ..chat_job import start_chat
from ..choices import Reply, total_usage, usage_of_results
from ..generation import Collected, Delta, Event, Finished
from ..logprobs import chat_logprobs, vllm_prompt_logprobs
from ..messages import ScoredToken
from ..scored_replies import ScoringPlan, scored_results, scored_stream
from ..tokenizer import PromptTokenizer
from .responding import arrival_time, engine, guarded, sse

router = APIRouter(route_class=CheckedRoute)

PATHS = ("/v1/chat/completions", "/v3/chat/completions", "/v3/v1/chat/completions")


async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    arrival = arrival_time()
    st = engine(request, body.model)
    job = await start_chat(st, body, "chat", arrival)
    plan, ids, gens, n, model = job.plan, job.prompt_ids, job.gens, job.n, job.model
    scoring = ScoringPlan.of(body, len(ids))
    rid = new_id("chatcmpl")
    top = scoring.top
    if body.stream:
        head = Reply(rid, model, now(), n, len(ids), body.include_usage())
        stream = _Stream(st.tokenizer, head, plan, top, body.prompt_logprobs)
        return sse(guarded(scored_stream(st, ids, scoring, gens, stream.chunks)))
    results, prompts = await unless_disconnected(request, scored_results(st, ids, scoring, gens))
    prompt_lps = prompts[0]
    reply = ChatCompletionResponse(
        id=rid,
        created=now(),
        model=model,
        choices=_choices(st.tokenizer, results, plan, bool(body.logprobs), top),
        usage=usage_of_results(len(ids), results),
        prompt_logprobs=None
        if prompt_lps is None
        else vllm_prompt_logprobs(st.tokenizer, prompt_lps, body.prompt_logprobs or 0),
    )
    return Response(reply.model_dump_json(), media_type="application/json")


for _path in PATHS:
    router.add_api_route(_path, chat_completions, methods=["POST"], response_model=None)


def _choice(
    index: int, text: str, reason: str, logprobs: ChoiceLogprobs | None, plan: tools.ToolPlan | None
) -> ChatChoice:
    content: str | None = text
    calls: list[ToolCall] = []
    if plan is not None:
        content, calls = tools.parse(text, plan)
    message = AssistantMessage(content=content, tool_calls=calls or None)
    finish = "tool_calls" if calls else reason
    return ChatChoice(index=index, message=message, logprobs=logprobs, finish_reason=finish)  # type: ignore[arg-type]


def _choices(
    tok: PromptTokenizer, results: list[Collected], plan: tools.ToolPlan | None, want_logprobs: bool, top: int
) -> list[ChatChoice]:
    def logprobs(ids: list[int], lps: list[float], scored: list[ScoredToken] | None) -> ChoiceLogprobs | None:
        return chat_logprobs(tok, ids, lps, scored, top) if want_logprobs else None

    if results[0].beams is not None:
        beams = results[0].beams
        return [
            _choice(i, b.text, b.finish_reason, logprobs(b.token_ids, b.logprobs, None), plan)
            for i, b in enumerate(beams)
        ]
    return [
        _choice(i, r.text, r.finished.reason, logprobs(r.token_ids, r.logprobs, r.scored), plan)
        for i, r in enumerate(results)
    ]


class _Stream:
    """Chunks of a streamed reply: ``n`` choices interleaved, tool calls sent once complete."""

    def __init__(
        self, tok: PromptTokenizer, reply: Reply, plan: tools.ToolPlan | None, top: int, prompt_top: int | None
    ) -> None:
        self.tok = tok
        self.reply = reply
        self.plan = plan
        self.top = top
        self.prompt_top = prompt_top
        self.splitters = (
            [tools.CallSplitter() for _ in range(reply.n)] if plan is not None and plan.mode == "auto" else []
        )
        self.texts = [""] * reply.n  # whole text per choice, for parsing tool calls at the end

    def chunk(
        self, index: int, delta: ChatDelta, finish: str | None = None, logprobs: ChoiceLogprobs | None = None
    ) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.reply.rid,
            created=self.reply.created,
            model=self.reply.model,
            choices=[ChatChunkChoice(index=index, delta=delta, logprobs=logprobs, finish_reason=finish)],  # type: ignore[arg-type]
        )

    def visible(self, index: int, text: str, final: bool) -> str:
        """The part of new text that is plain content (not a tool call being written)."""
        if self.plan is None:
            return text
        self.texts[index] += text
        if self.splitters:
            return self.splitters[index].feed(text, final)
        return ""  # required / named: the whole reply is the call

    async def chunks(
        self, events: AsyncIterator[tuple[int, Event]], prompts: list[list[ScoredToken] | None]
    ) -> AsyncIterator[ChatCompletionChunk]:
        for i in range(self.reply.n):
            first = self.chunk(i, ChatDelta(role="assistant", content=""))
            if i == 0 and prompts[0] is not None:
                first.prompt_logprobs = vllm_prompt_logprobs(self.tok, prompts[0], self.prompt_top or 0)
            yield first
        completion_tokens = 0
        async for index, ev in events:
            if isinstance(ev, str):
                text = self.visible(index, ev, False)
                if text:
                    yield self.chunk(index, ChatDelta(content=text))
            elif isinstance(ev, Delta):
                text = self.visible(index, ev.text, False)
                lps = chat_logprobs(self.tok, ev.token_ids, ev.logprobs, ev.scored, self.top)
                yield self.chunk(index, ChatDelta(content=text), logprobs=lps)
            elif isinstance(ev, Finished):
                completion_tokens += ev.completion_tokens
                async for c in self.finish(index, ev):
                    yield c
        if self.reply.include_usage:
            usage = total_usage(self.reply.prompt_tokens, completion_tokens)
            yield ChatCompletionChunk(
                id=self.reply.rid, created=self.reply.created, model=self.reply.model, choices=[], usage=usage
            )

    async def finish(self, index: int, ev: Finished) -> AsyncIterator[ChatCompletionChunk]:
        reason = ev.reason
        if self.plan is not None:
            tail = self.visible(index, "", True)
            _, calls = tools.parse(self.texts[index], self.plan)
            if calls:
                deltas = [
                    ToolCallDelta(index=k, id=c.id, type="function", function=c.function) for k, c in enumerate(calls)
                ]
                yield self.chunk(index, ChatDelta(tool_calls=deltas))
                reason = "tool_calls"
            elif self.plan.mode != "auto" or (self.splitters and self.splitters[index].in_call):
                # No parsable call after all: what was held back is content.
                held = self.texts[index] if self.plan.mode != "auto" else self.splitters[index].rest
                if held:
                    yield self.chunk(index, ChatDelta(content=held))
            elif tail:
                yield self.chunk(index, ChatDelta(content=tail))
        yield self.chunk(index, ChatDelta(), reason)
