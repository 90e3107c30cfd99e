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
    new_id,
    now,
)
from genmesh.protocol.asgi import unless_disconnected

from ..generation import Finished, collect, usage_of
from ..params import check_supported, completion_budget, sampling_params
from .responding import arrival_time, engine, guarded, sse

router = APIRouter()

PATHS = ("/v1/chat/completions", "/v3/chat/completions", "/v3/v1/chat/completions")


async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    arrival = arrival_time()
    st = engine(request, body.model)
    model = st.check_model(body.model)
    check_supported(body)
    prompt = st.tokenizer.chat_prompt(body.messages, body.add_generation_prompt is not False)
    ids = st.tokenizer.encode(prompt, add_special_tokens=False)
    limit_param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    budget = completion_budget(
        body.completion_limit(),
        len(ids),
        st.source.context_length,
        st.settings.max_tokens_limit,
        limit_param,
        "messages",
    )
    events = st.generator.start("chat", ids, sampling_params(body, budget), body.stop_list(), arrival)
    rid = new_id("chatcmpl")
    if body.stream:
        return sse(guarded(_chunks(events, rid, model, now(), body.include_usage())))
    text, fin = await unless_disconnected(request, collect(events))
    reply = ChatCompletionResponse(
        id=rid,
        created=now(),
        model=model,
        choices=[ChatChoice(message=AssistantMessage(content=text), finish_reason=fin.reason)],  # type: ignore[arg-type]
        usage=usage_of(fin),
    )
    return Response(reply.model_dump_json(), media_type="application/json")


for _path in PATHS:
    router.add_api_route(_path, chat_completions, methods=["POST"], response_model=None)


async def _chunks(
    events: AsyncIterator[str | Finished], rid: str, model: str, created: int, include_usage: bool
) -> AsyncIterator[ChatCompletionChunk]:
    def chunk(delta: ChatDelta, finish: str | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=rid,
            created=created,
            model=model,
            choices=[ChatChunkChoice(delta=delta, finish_reason=finish)],  # type: ignore[arg-type]
        )

    yield chunk(ChatDelta(role="assistant", content=""))
    async for ev in events:
        if isinstance(ev, Finished):
            yield chunk(ChatDelta(), ev.reason)
            if include_usage:
                yield ChatCompletionChunk(id=rid, created=created, model=model, choices=[], usage=usage_of(ev))
            return
        yield chunk(ChatDelta(content=ev))
