"""``/v1/files``: upload (multipart, ``purpose=batch``), list, retrieve, content, delete; each file
visible only to the API key that uploaded it (another key gets 404)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException

from genmesh.protocol import OpenAIError, file_too_large, invalid_request
from genmesh.protocol.batches import FileDeleted

from ..admission.auth import ApiKey
from ..exchange.errors import admission_error, authenticate
from ..redis.client import RedisUnavailable
from .common import gateway, json_reply

router = APIRouter()
T = TypeVar("T")
PURPOSES = ("batch",)


async def stored(call: Awaitable[T]) -> T:
    """A file or batch store call; Redis away is a 503 with Retry-After."""
    try:
        return await call
    except RedisUnavailable as exc:
        raise admission_error(exc, 1) from exc


async def caller(request: Request) -> ApiKey:
    return await authenticate(gateway(request), request.headers.get("authorization"))


@router.post("/v1/files")
async def upload(request: Request) -> Response:
    st = gateway(request)
    key = await caller(request)
    limit = st.settings.files_max_bytes
    try:
        form = await request.form(max_files=1, max_fields=8, max_part_size=1024)
    except MultiPartException as exc:
        raise invalid_request(f"malformed multipart body: {exc.message}", param="file") from exc
    try:
        purpose = form.get("purpose")
        if purpose is None:
            raise invalid_request("missing required parameter: 'purpose' (use 'batch')", param="purpose")
        if not isinstance(purpose, str) or purpose not in PURPOSES:
            shown = purpose if isinstance(purpose, str) else "a file"
            raise OpenAIError(
                f"purpose '{shown}' is not supported by this server; use 'batch'", param="purpose", code="invalid_value"
            )
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise invalid_request("missing required parameter: 'file' (a JSONL file)", param="file")
        size = upload.size if upload.size is not None else await _measure(upload)
        if size > limit:
            raise file_too_large(limit)
        await upload.seek(0)
        async with st.quotas.slot():  # the form is spooled to disk: this reads it a chunk at a time
            name = upload.filename or "upload.jsonl"
            obj = await stored(st.files.upload(key.key_id, name, purpose, size, upload.read))
    finally:
        await form.close()
    return json_reply(obj.model_dump_json())


async def _measure(upload: UploadFile) -> int:
    return int(await asyncio.to_thread(upload.file.seek, 0, 2))


@router.get("/v1/files")
async def list_files(
    request: Request,
    purpose: str | None = None,
    limit: int = Query(default=10000, ge=1, le=10000),
    after: str | None = Query(default=None, max_length=200),
) -> Response:
    key = await caller(request)
    page = await stored(gateway(request).files.page(key.key_id, purpose, limit, after))
    return json_reply(page.model_dump_json())


@router.get("/v1/files/{file_id}")
async def retrieve(file_id: str, request: Request) -> Response:
    key = await caller(request)
    return json_reply((await stored(gateway(request).files.get(key.key_id, file_id))).model_dump_json())


@router.get("/v1/files/{file_id}/content")
async def content(file_id: str, request: Request) -> Response:
    key = await caller(request)
    files = gateway(request).files
    obj, count = await stored(files.opened(key.key_id, file_id))
    headers = {"Content-Length": str(obj.bytes)}
    return StreamingResponse(
        files.chunks(key.key_id, file_id, count), media_type="application/octet-stream", headers=headers
    )


@router.delete("/v1/files/{file_id}")
async def delete(file_id: str, request: Request) -> Response:
    key = await caller(request)
    await stored(gateway(request).files.delete(key.key_id, file_id))
    return json_reply(FileDeleted(id=file_id).model_dump_json())
