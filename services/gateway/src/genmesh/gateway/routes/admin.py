"""Admin endpoints (admin key required): create, list and revoke API keys; read a key's usage."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError

from genmesh.protocol import OpenAIError
from genmesh.protocol.server.asgi import CheckedRoute

from ..auth import check_admin
from ..exchange.errors import store_unavailable
from .common import gateway

router = APIRouter(prefix="/admin", route_class=CheckedRoute)


class NewKey(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tenant: str = Field(min_length=1, max_length=128)
    name: str = ""
    priority: int = Field(default=5, ge=0, le=9)
    max_priority: int | None = Field(default=None, ge=0, le=9)
    rpm: int = Field(default=0, ge=0)
    tpm: int = Field(default=0, ge=0)
    max_concurrent: int = Field(default=0, ge=0)


T = TypeVar("T")


async def _stored(request: Request, call: Awaitable[T]) -> T:
    """A key-store call; Redis away is the request path's 503 with Retry-After, never a 500."""
    try:
        return await call
    except (RedisError, OSError) as exc:
        raise store_unavailable(gateway(request), exc, "key store") from exc


def _admin(request: Request) -> None:
    check_admin(request.headers.get("authorization"), gateway(request).admin_key)


@router.post("/keys")
async def create_key(body: NewKey, request: Request) -> JSONResponse:
    _admin(request)
    secret, key = await _stored(request, gateway(request).keys.create(**body.model_dump()))
    return JSONResponse({"api_key": secret, **key.public()}, status_code=201)


@router.get("/keys")
async def list_keys(request: Request) -> JSONResponse:
    _admin(request)
    keys = await _stored(request, gateway(request).keys.list())
    return JSONResponse({"data": [k.public() for k in keys]})


@router.delete("/keys/{key_id}")
async def revoke_key(key_id: str, request: Request) -> JSONResponse:
    _admin(request)
    if not await _stored(request, gateway(request).keys.revoke(key_id)):
        raise OpenAIError(f"no API key with id '{key_id}'", status=404, type="not_found_error", code="key_not_found")
    return JSONResponse({"key_id": key_id, "revoked": True})


@router.get("/keys/{key_id}/usage")
async def key_usage(key_id: str, request: Request) -> JSONResponse:
    _admin(request)
    return JSONResponse({"key_id": key_id, **await _stored(request, gateway(request).limiter.usage(key_id))})
