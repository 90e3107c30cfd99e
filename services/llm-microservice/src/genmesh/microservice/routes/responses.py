"""``POST /v1/responses``: validated against the shared wire models (``model`` defaults to
``LLM_MODEL_ID``), then relayed to the engine like chat.

A Responses stream has no ``[DONE]``: it ends with ``response.completed``, ``response.incomplete``
or ``response.failed``. When the engine breaks it off before that, the client gets an ``error``
event and then ``response.failed``, numbered after the last event it saw.
"""

from __future__ import annotations

import re

from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import OpenAIError, now
from genmesh.protocol.response_objects import ResponseObject
from genmesh.protocol.sse import response_failed
from genmesh.relay import StreamEnd

from ..normalise import normalise_responses
from .responding import json_body, relay_call, state_of

router = APIRouter()

_SEQUENCE = re.compile(rb'"sequence_number":(\d+)')
_RESPONSE_ID = re.compile(rb'"response":\{"id":"([^"\\]{1,200})"')


class ResponsesEnd(StreamEnd):
    """Ends like any Responses stream; fails with ``error`` and ``response.failed``, numbered after
    the last event relayed and naming the response the engine had started."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.sequence = -1
        self.response_id = "resp_unknown"
        self.seen_id = False

    def ended(self, event: bytes) -> bool:
        at = event.rfind(b'"sequence_number":')
        if at != -1 and (m := _SEQUENCE.match(event, at)) is not None:
            self.sequence = max(self.sequence, int(m.group(1)))
        if not self.seen_id and (m := _RESPONSE_ID.search(event)) is not None:
            self.response_id, self.seen_id = m.group(1).decode(), True
        return super().ended(event)

    def failure(self, err: OpenAIError) -> bytes:
        response = ResponseObject(id=self.response_id, created_at=now(), status="failed", model=self.model)
        return response_failed(self.sequence + 1, response, err)


@router.post("/v1/responses", response_model=None)
@router.post("/v3/responses", response_model=None, include_in_schema=False)
@router.post("/v3/v1/responses", response_model=None, include_in_schema=False)
async def create_response(request: Request) -> Response:
    st = state_of(request)
    call = normalise_responses(await json_body(request), st.settings.llm_model_id)
    return await relay_call(request, call, ResponsesEnd(str(call.body.get("model") or "")))
