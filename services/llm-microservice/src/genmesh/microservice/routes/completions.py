"""``POST /v1/completions``: passed through to the engine (``model`` defaults to ``LLM_MODEL_ID``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..normalise import normalise_completion
from .responding import json_body, relay_call, state_of

router = APIRouter()
PATH = "/v1/completions"


@router.post(PATH, response_model=None, include_in_schema=False)
async def completions(request: Request) -> Response:
    st = state_of(request)
    call = normalise_completion(await json_body(request), st.settings.llm_model_id)
    return await relay_call(request, call)
