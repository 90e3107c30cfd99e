"""``GET /v1/models``: the union of the configured models.

The completion endpoints are served as plain ASGI by ``completions.py`` (see ``app.py``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import ModelCard, ModelList

from ..exchange.errors import authenticate
from .common import gateway, json_reply

router = APIRouter()


@router.get("/v1/models")
async def models(request: Request) -> Response:
    st = gateway(request)
    await authenticate(st, request.headers.get("authorization"))
    cards = ModelList(data=[ModelCard(id=name, kind=route.kind) for name, route in st.config.models.items()])
    return json_reply(cards.model_dump_json())
