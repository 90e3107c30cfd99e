"""``POST /v1/chat/completions`` (and the OVMS ``/v3`` aliases)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

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
    FunctionCallDelta,
    ToolCall,
    ToolCallDelta,
    new_id,
    now,
)
from genmesh.protocol.server.asgi import CheckedRoute
from genmesh.protocol.server.tracing import annotate

from ...client.generation import Collected, Delta, Event, Finished
from ...client.n_choices import Reply, usage_of_results
from ...core.ipc import ScoredToken
from .. import tools
from ..hermes_stream import CallStart, HermesStream
from ..intake import start_chat
from ..logprobs import chat_logprobs, vllm_prompt_logprobs
from ..prompt_logprobs import Prompts, ScoringPlan
from ..prompts import PromptTokenizer
from ..qwen3coder import Qwen3CoderStream
from . import spoken_chat
from .responding import add_api_route, arrival_time, engine, generated_reply

router = APIRouter(route_class=CheckedRoute)


async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    arrival = arrival_time()
    st = engine(request, body.model)
    spoken = await spoken_chat.prepare(body, request) if body.spoken() else None  # audio in or out
    if spoken is not None:
        body = spoken.body  # the transcripts in place of the audio parts
    job = await start_chat(st, body, "chat", arrival)
    ids = job.prompt_ids
    scoring = ScoringPlan.of(body, len(ids))
    head = Reply(new_id("chatcmpl"), job.model, now(), job.n, len(ids), body.include_usage())
    annotate({"gen_ai.response.id": head.rid, "gen_ai.request.model": job.model})
    writer = _Writer(st.tokenizer, head, job.plan, bool(body.logprobs), scoring.top, body.prompt_logprobs)
    if spoken is not None:
        return await spoken_chat.reply(spoken, request, st, ids, scoring, job.gens, writer)
    return await generated_reply(request, st, ids, scoring, job.gens, bool(body.stream), writer)


add_api_route(router, "chat/completions", chat_completions)


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


@dataclass
class _Writer:
    """A chat reply: whole, or as chunks (``n`` choices interleaved). Streamed with ``tool_choice`` auto,
    Hermes calls go out as they are written (hermes_stream.py), Qwen3-Coder's call by call
    (qwen3coder.py); other calls once complete."""

    tok: PromptTokenizer
    reply: Reply
    plan: tools.ToolPlan | None
    want_logprobs: bool
    top: int
    prompt_top: int | None
    splitters: list[tools.CallSplitter] = field(init=False)
    streams: list[HermesStream | Qwen3CoderStream] = field(init=False)  # calls read as they are written
    texts: list[str] = field(init=False)  # whole text per choice, for parsing tool calls at the end

    def __post_init__(self) -> None:
        auto = self.plan is not None and self.plan.mode == "auto"
        incremental = auto and self.plan is not None and self.plan.format in ("hermes", "qwen3coder")
        self.streams = [self._stream() for _ in range(self.reply.n)] if incremental else []
        self.splitters = [tools.CallSplitter() for _ in range(self.reply.n)] if auto and not incremental else []
        self.texts = [""] * self.reply.n

    def _stream(self) -> HermesStream | Qwen3CoderStream:
        assert self.plan is not None
        return Qwen3CoderStream(self.plan.tools) if self.plan.format == "qwen3coder" else HermesStream()

    def whole(self, results: list[Collected], prompts: Prompts) -> ChatCompletionResponse:
        prompt_lps = prompts[0]
        return ChatCompletionResponse(
            id=self.reply.rid,
            created=now(),
            model=self.reply.model,
            choices=self._choices(results),
            usage=usage_of_results(self.reply.prompt_tokens, results),
            prompt_logprobs=None
            if prompt_lps is None
            else vllm_prompt_logprobs(self.tok, prompt_lps, self.prompt_top or 0),
        )

    def _logprobs(self, ids: list[int], lps: list[float], scored: list[ScoredToken] | None) -> ChoiceLogprobs | None:
        return chat_logprobs(self.tok, ids, lps, scored, self.top) if self.want_logprobs else None

    def _choices(self, results: list[Collected]) -> list[ChatChoice]:
        if results[0].beams is not None:
            return [
                _choice(i, b.text, b.finish_reason, self._logprobs(b.token_ids, b.logprobs, None), self.plan)
                for i, b in enumerate(results[0].beams)
            ]
        return [
            _choice(i, r.text, r.finished.reason, self._logprobs(r.token_ids, r.logprobs, r.scored), self.plan)
            for i, r in enumerate(results)
        ]

    def chunk(
        self, index: int, delta: ChatDelta, finish: str | None = None, logprobs: ChoiceLogprobs | None = None
    ) -> ChatCompletionChunk:
        choice = ChatChunkChoice(index=index, delta=delta, logprobs=logprobs, finish_reason=finish)  # type: ignore[arg-type]
        return self.reply.chunk(ChatCompletionChunk, [choice])

    def visible(self, index: int, text: str, final: bool) -> str:
        """The part of new text that is plain content (not a tool call being written)."""
        if self.plan is None:
            return text
        self.texts[index] += text
        if self.splitters:
            return self.splitters[index].feed(text, final)
        return ""  # required / named: the whole reply is the call

    async def chunks(
        self, events: AsyncIterator[tuple[int, Event]], prompts: Prompts
    ) -> AsyncIterator[ChatCompletionChunk]:
        for i in range(self.reply.n):
            first = self.chunk(i, ChatDelta(role="assistant", content=""))
            if i == 0 and prompts[0] is not None:
                first.prompt_logprobs = vllm_prompt_logprobs(self.tok, prompts[0], self.prompt_top or 0)
            yield first
        completion_tokens = 0
        async for index, ev in events:
            if self.streams and isinstance(ev, str | Delta):
                out = self.pieces(index, ev if isinstance(ev, str) else ev.text, False)
                if isinstance(ev, Delta):  # the tokens' logprobs ride on the first chunk they made
                    lps = chat_logprobs(self.tok, ev.token_ids, ev.logprobs, ev.scored, self.top)
                    out = out or [self.chunk(index, ChatDelta(content=""))]
                    out[0].choices[0].logprobs = lps
                for c in out:
                    yield c
            elif isinstance(ev, str):
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
            yield self.reply.usage_chunk(ChatCompletionChunk, completion_tokens)

    def pieces(self, index: int, text: str, final: bool) -> list[ChatCompletionChunk]:
        """Calls as OpenAI streams them: id, type and name first, then argument fragments."""
        out: list[ChatCompletionChunk] = []
        for piece in self.streams[index].feed(text, final):
            if isinstance(piece, str):
                delta = ChatDelta(content=piece)
            elif isinstance(piece, CallStart):
                call = FunctionCallDelta(name=piece.name, arguments="")
                delta = ChatDelta(
                    tool_calls=[ToolCallDelta(index=piece.index, id=piece.id, type="function", function=call)]
                )
            else:
                args = FunctionCallDelta(arguments=piece.text)
                delta = ChatDelta(tool_calls=[ToolCallDelta(index=piece.index, function=args)])
            out.append(self.chunk(index, delta))
        return out

    async def finish(self, index: int, ev: Finished) -> AsyncIterator[ChatCompletionChunk]:
        reason = ev.reason
        if self.streams:
            for c in self.pieces(index, "", True):
                yield c
            if self.streams[index].calls:
                reason = "tool_calls"
        elif self.plan is not None:
            tail = self.visible(index, "", True)
            _, calls = tools.parse(self.texts[index], self.plan)
            if calls:
                deltas = [
                    ToolCallDelta(
                        index=k, id=c.id, type="function", function=FunctionCallDelta(**c.function.model_dump())
                    )
                    for k, c in enumerate(calls)
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
