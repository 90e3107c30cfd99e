"""``POST /v1/chat/completions``: OPEA input (``messages`` as a string or a list) normalised, then relayed."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..normalise import normalise_chat
from .responding import json_body, relay_call, state_of

router = APIRouter()
PATH = "/v1/chat/completions"


@router.post(PATH, response_model=None, include_in_schema=False)
async def chat_completions(request: Request) -> Response:
    st = state_of(request)
    call = normalise_chat(await json_body(request), st.settings.llm_model_id)
    return await relay_call(request, call)
