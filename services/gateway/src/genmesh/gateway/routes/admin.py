"""Admin endpoints (admin key required): create, list and revoke API keys; read a key's usage; list and
purge what a key or a tenant stores (files, batches, stored responses: ``storage/purge.py``)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError

from genmesh.protocol import OpenAIError
from genmesh.protocol.server.asgi import CheckedRoute

from ..admission.auth import check_admin
from ..exchange.errors import admission_error, store_unavailable
from ..redis.client import RedisUnavailable
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
    aspm: int = Field(default=0, ge=0)  # audio seconds per minute (0: unlimited)


T = TypeVar("T")


async def _stored(request: Request, call: Awaitable[T]) -> T:
    """A key-store call; Redis away is the request path's 503 with Retry-After, never a 500."""
    try:
        return await call
    except (RedisError, OSError) as exc:
        raise store_unavailable(gateway(request), exc, "key store") from exc
    except RedisUnavailable as exc:  # counted already
        raise admission_error(exc, 1) from exc


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


KEY_ID = Path(pattern=r"^[A-Za-z0-9_-]{1,64}$")
LIMIT = Query(default=100, ge=0, le=10_000, description="items of each kind listed (the counts cover all)")


@router.delete("/keys/{key_id}")
async def revoke_key(
    request: Request,
    key_id: str = KEY_ID,
    purge: bool = Query(default=False, description="also delete the key's files, batches and stored responses"),
) -> JSONResponse:
    _admin(request)
    st = gateway(request)
    if not await _stored(request, st.keys.revoke(key_id)):
        raise OpenAIError(f"no API key with id '{key_id}'", status=404, type="not_found_error", code="key_not_found")
    out: dict[str, object] = {"key_id": key_id, "revoked": True}
    if purge:
        out["deleted"] = await _stored(request, st.storage.purge(key_id))
    return JSONResponse(out)


@router.get("/keys/{key_id}/storage")
async def key_storage(request: Request, key_id: str = KEY_ID, limit: int = LIMIT) -> JSONResponse:
    """What the key stores (also a revoked or expired key's: its files outlive it)."""
    _admin(request)
    found = await _stored(request, gateway(request).storage.of(key_id, limit))
    return JSONResponse({"key_id": key_id, **found.public()})


@router.delete("/keys/{key_id}/storage")
async def purge_key_storage(request: Request, key_id: str = KEY_ID) -> JSONResponse:
    _admin(request)
    return JSONResponse({"key_id": key_id, "deleted": await _stored(request, gateway(request).storage.purge(key_id))})


async def _tenant_keys(request: Request, tenant: str) -> list[str]:
    keys = await _stored(request, gateway(request).keys.list())
    return [k.key_id for k in keys if k.tenant == tenant]


@router.get("/tenants/{tenant}/storage")
async def tenant_storage(tenant: str, request: Request, limit: int = LIMIT) -> JSONResponse:
    """What each of the tenant's keys (those still listed: a key's record lasts until it expires, a
    revoked one's for a week) stores."""
    _admin(request)
    st = gateway(request)
    keys = {}
    for key_id in await _tenant_keys(request, tenant):
        keys[key_id] = (await _stored(request, st.storage.of(key_id, limit))).public()
    return JSONResponse({"tenant": tenant, "keys": keys})


@router.delete("/tenants/{tenant}/storage")
async def purge_tenant_storage(tenant: str, request: Request) -> JSONResponse:
    _admin(request)
    st = gateway(request)
    deleted = {k: await _stored(request, st.storage.purge(k)) for k in await _tenant_keys(request, tenant)}
    return JSONResponse({"tenant": tenant, "deleted": deleted})


@router.get("/keys/{key_id}/usage")
async def key_usage(key_id: str, request: Request) -> JSONResponse:
    _admin(request)
    return JSONResponse({"key_id": key_id, **await _stored(request, gateway(request).limiter.usage(key_id))})
