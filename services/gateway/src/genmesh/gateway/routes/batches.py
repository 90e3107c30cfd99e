"""``/v1/batches``: create (from an uploaded ``purpose=batch`` file), retrieve, list, cancel;
each batch visible only to the API key that made it (another key gets 404)."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from genmesh.protocol import OpenAIError
from genmesh.protocol.batches import BATCH_ENDPOINTS, BatchCreateRequest
from genmesh.protocol.errors import quote
from genmesh.protocol.server.asgi import CheckedRoute

from .common import gateway, json_reply
from .files import caller, stored

router = APIRouter(route_class=CheckedRoute)
WINDOWS = ("24h",)
OUTPUT_TTL_MIN_S, OUTPUT_TTL_MAX_S = 3600, 30 * 24 * 3600  # OpenAI's bounds of output_expires_after.seconds
MAX_METADATA = 16  # pairs, each key at most 64 characters and each value at most 512 (OpenAI's limits)


def _check(req: BatchCreateRequest) -> None:
    if req.endpoint not in BATCH_ENDPOINTS:  # all of OpenAI's, /v1/embeddings included
        raise OpenAIError(
            f"endpoint '{quote(req.endpoint, 80)}' is not a batch endpoint; use one of " + ", ".join(BATCH_ENDPOINTS),
            param="endpoint",
            code="invalid_value",
        )
    if req.completion_window not in WINDOWS:
        raise OpenAIError(
            f"completion_window '{quote(req.completion_window, 20)}' is not supported; use '24h'",
            param="completion_window",
            code="invalid_value",
        )
    expires = req.output_expires_after
    if expires is not None and (
        set(expires) != {"anchor", "seconds"}
        or expires["anchor"] != "created_at"
        or not isinstance(expires["seconds"], int)
        or not OUTPUT_TTL_MIN_S <= expires["seconds"] <= OUTPUT_TTL_MAX_S
    ):
        raise OpenAIError(
            "output_expires_after takes {'anchor': 'created_at', 'seconds': N} with N from "
            f"{OUTPUT_TTL_MIN_S} to {OUTPUT_TTL_MAX_S}",
            param="output_expires_after",
            code="invalid_value",
        )
    meta = req.metadata or {}
    if len(meta) > MAX_METADATA or any(len(k) > 64 or len(v) > 512 for k, v in meta.items()):
        raise OpenAIError(
            f"metadata holds at most {MAX_METADATA} pairs, keys up to 64 characters and values up to 512",
            param="metadata",
            code="invalid_value",
        )


@router.post("/v1/batches")
async def create(req: BatchCreateRequest, request: Request) -> Response:
    st = gateway(request)
    key = await caller(request)
    _check(req)
    file = await stored(st.files.get(key.key_id, req.input_file_id, param="input_file_id"))
    if file.purpose != "batch":
        raise OpenAIError(
            f"file '{file.id}' has purpose '{file.purpose}'; a batch's input needs purpose 'batch'",
            param="input_file_id",
            code="invalid_value",
        )
    async with st.quotas.slot():  # the input file is read whole: at most files_max_concurrent at once
        data = await stored(st.files.content(key.key_id, file.id, param="input_file_id"))
        batch = await stored(
            st.batches.create(
                key.key_id,
                file,
                data,
                req.endpoint,
                req.completion_window,
                req.metadata,
                output_ttl_s=req.output_expires_after["seconds"] if req.output_expires_after else None,
            )
        )
    return json_reply(batch.model_dump_json())


@router.get("/v1/batches/{batch_id}")
async def retrieve(batch_id: str, request: Request) -> Response:
    key = await caller(request)
    return json_reply((await stored(gateway(request).batches.get(key.key_id, batch_id))).model_dump_json())


@router.get("/v1/batches")
async def list_batches(
    request: Request,
    limit: int = Query(default=20, ge=1, le=100),
    after: str | None = Query(default=None, max_length=200),
) -> Response:
    key = await caller(request)
    return json_reply((await stored(gateway(request).batches.page(key.key_id, limit, after))).model_dump_json())


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel(batch_id: str, request: Request) -> Response:
    key = await caller(request)
    return json_reply((await stored(gateway(request).batches.cancel(key.key_id, batch_id))).model_dump_json())
