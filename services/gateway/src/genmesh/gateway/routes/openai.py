"""``GET /v1/models``: the union of the configured models.

The completion endpoints are served as plain ASGI by ``completions.py`` (see ``app.py``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from redis.exceptions import RedisError

from genmesh.protocol import ModelCard, ModelList

from ..queue import StoreUnavailable
from .common import admission_error, gateway

router = APIRouter()


@router.get("/v1/models")
async def models(request: Request) -> Response:
    st = gateway(request)
    try:
        await st.keys.authenticate(request.headers.get("authorization"), st.auth_required)
    except (RedisError, OSError) as exc:
        st.metrics.redis_errors.inc()
        raise admission_error(StoreUnavailable(f"queue store unavailable: {type(exc).__name__}"), 1) from exc
    cards = ModelList(data=[ModelCard(id=name) for name in st.config.models])
    return Response(cards.model_dump_json(), media_type="application/json")
