"""``POST /v1/responses`` (and the OVMS ``/v3`` aliases): the Responses API on the chat path.

The engine is stateless: it stores nothing, so ``store`` is reported false and
``previous_response_id`` is refused (the gateway keeps conversations).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import now
from genmesh.protocol.responses import ResponsesRequest
from genmesh.protocol.server.asgi import CheckedRoute, unless_disconnected

from ...client.n_choices import collect_all, merged
from ..intake import start_chat
from ..responses.input import check_engine_supported, responses_params, to_chat
from ..responses.output import finished, shell, unary_output
from ..responses.stream import ResponseEvents
from .responding import add_api_route, arrival_time, engine, json_reply, sse

router = APIRouter(route_class=CheckedRoute)


async def create_response(body: ResponsesRequest, request: Request) -> Response:
    arrival = arrival_time()
    st = engine(request, body.model)
    with responses_params():
        check_engine_supported(body)
        job = await start_chat(st, to_chat(body), "responses", arrival)
    base = shell(body, job.model, now())
    prompt_tokens = len(job.prompt_ids)
    if body.stream:
        events = ResponseEvents(base, job.plan, prompt_tokens)
        return sse(events.events(merged(st.generator, job.gens)), st.settings.stream_interval)
    result = (await unless_disconnected(request, collect_all(st.generator, job.gens)))[0]
    reason = result.finished.reason
    output = unary_output(result.text, reason, job.plan)
    reply = finished(base, output, reason, prompt_tokens, result.finished.completion_tokens, now())
    return json_reply(reply)


add_api_route(router, "responses", create_response)
