"""``GET`` and ``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``: stored
responses, each visible only to the API key that made it (any other key gets 404)."""

from __future__ import annotations

from typing import Literal

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from redis.exceptions import RedisError

from genmesh.protocol.response_objects import DeletedResponse, InputItemList

from ..admission.auth import ApiKey
from ..exchange.errors import admission_error
from ..redis.client import RedisUnavailable
from ..storage.responses import not_found
from .common import gateway, json_reply

router = APIRouter()


async def _caller(request: Request) -> ApiKey:
    st = gateway(request)
    try:
        return await st.keys.authenticate(request.headers.get("authorization"), st.auth_required)
    except (RedisError, OSError) as exc:
        st.metrics.redis_errors.inc()
        raise admission_error(RedisUnavailable(f"queue store unavailable: {type(exc).__name__}"), 1) from exc


@router.get("/v1/responses/{response_id}")
async def retrieve(response_id: str, request: Request) -> Response:
    key = await _caller(request)
    stored = await gateway(request).responses.load(response_id, key.key_id)
    return json_reply(orjson.dumps(stored.response))


@router.delete("/v1/responses/{response_id}")
async def delete(response_id: str, request: Request) -> Response:
    key = await _caller(request)
    await gateway(request).responses.delete(response_id, key.key_id)
    return json_reply(DeletedResponse(id=response_id).model_dump_json())


@router.get("/v1/responses/{response_id}/input_items")
async def input_items(
    response_id: str,
    request: Request,
    limit: int = Query(default=20, ge=1, le=100),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> Response:
    """The conversation's input items (history first in ``asc``), paged as OpenAI pages them."""
    key = await _caller(request)
    stored = await gateway(request).responses.load(response_id, key.key_id)
    items = [i for i in stored.input if isinstance(i, dict)]
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [i.get("id") for i in items]
        if after not in ids:
            raise not_found(after, "after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    body = InputItemList(
        data=page,
        first_id=page[0].get("id") if page else None,
        last_id=page[-1].get("id") if page else None,
        has_more=len(items) > limit,
    )
    return json_reply(body.model_dump_json())
