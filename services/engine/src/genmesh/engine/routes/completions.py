"""``POST /v1/completions`` (and the OVMS ``/v3`` aliases)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import CompletionChoice, CompletionRequest, CompletionResponse, new_id, now
from genmesh.protocol.asgi import unless_disconnected

from ..generation import Finished, collect, usage_of
from ..params import check_supported, completion_budget, sampling_params
from .responding import arrival_time, engine, guarded, sse

router = APIRouter()

PATHS = ("/v1/completions", "/v3/completions", "/v3/v1/completions")


async def completions(body: CompletionRequest, request: Request) -> Response:
    arrival = arrival_time()
    st = engine(request, body.model)
    model = st.check_model(body.model)
    check_supported(body)
    ids = st.tokenizer.completion_prompt(body)
    budget = completion_budget(
        body.max_tokens, len(ids), st.source.context_length, st.settings.max_tokens_limit, "max_tokens", "prompt"
    )
    events = st.generator.start("completions", ids, sampling_params(body, budget), body.stop_list(), arrival)
    rid = new_id("cmpl")
    if body.stream:
        return sse(guarded(_chunks(events, rid, model, now(), body.include_usage())))
    text, fin = await unless_disconnected(request, collect(events))
    reply = CompletionResponse(
        id=rid,
        created=now(),
        model=model,
        choices=[CompletionChoice(text=text, finish_reason=fin.reason)],  # type: ignore[arg-type]
        usage=usage_of(fin),
    )
    return Response(reply.model_dump_json(), media_type="application/json")


for _path in PATHS:
    router.add_api_route(_path, completions, methods=["POST"], response_model=None)


async def _chunks(
    events: AsyncIterator[str | Finished], rid: str, model: str, created: int, include_usage: bool
) -> AsyncIterator[CompletionResponse]:
    def chunk(text: str, finish: str | None = None) -> CompletionResponse:
        return CompletionResponse(
            id=rid,
            created=created,
            model=model,
            choices=[CompletionChoice(text=text, finish_reason=finish)],  # type: ignore[arg-type]
        )

    async for ev in events:
        if isinstance(ev, Finished):
            yield chunk("", ev.reason)
            if include_usage:
                yield CompletionResponse(id=rid, created=created, model=model, choices=[], usage=usage_of(ev))
            return
        yield chunk(ev)
