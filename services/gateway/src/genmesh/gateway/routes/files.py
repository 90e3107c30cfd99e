"""``/v1/files``: upload (multipart, ``purpose=batch``), list, retrieve, content, delete; each file
visible only to the API key that uploaded it (another key gets 404)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse

from genmesh.protocol import OpenAIError, file_too_large, invalid_request
from genmesh.protocol.batches import FileDeleted
from genmesh.protocol.server.http_server import admitted

from ..admission.auth import ApiKey
from ..exchange.errors import admission_error, authenticate
from ..redis.client import RedisUnavailable
from .common import gateway, json_reply
from .upload_stream import streamed_form

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
    """Admitted before its bytes: the key, this replica's upload slot and the key's quotas (reserved
    for the body's length) come first; then the form is parsed as it arrives and its file streamed
    to Redis chunk by chunk (``upload_stream``), counted at its own size once stored."""
    st = gateway(request)
    key = await caller(request)
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise invalid_request("send the file as multipart/form-data with 'purpose' and 'file' fields", param="file")
    limit = st.settings.files_max_bytes
    bound = _declared_length(request, limit)
    async with st.quotas.slot():
        try:
            async with st.files.receiving(key.key_id, bound) as sink:
                admitted(request.scope)  # the body has the upload's time from now
                form = await streamed_form(request, sink, max_fields=8, max_field_bytes=1024)
                purpose = form.get("purpose")
                if purpose is None:
                    raise invalid_request("missing required parameter: 'purpose' (use 'batch')", param="purpose")
                if not isinstance(purpose, str) or purpose not in PURPOSES:
                    shown = purpose if isinstance(purpose, str) else "a file"
                    raise OpenAIError(
                        f"purpose '{shown}' is not supported by this server; use 'batch'",
                        param="purpose",
                        code="invalid_value",
                    )
                part = form.get("file")
                if part is None or isinstance(part, str):
                    raise invalid_request("missing required parameter: 'file' (a JSONL file)", param="file")
                name = getattr(part, "filename", None) or "upload.jsonl"
                obj = await st.files.save(key.key_id, sink, name, purpose)
        except RedisUnavailable as exc:
            raise admission_error(exc, 1) from exc
    return json_reply(obj.model_dump_json())


def _declared_length(request: Request, limit: int) -> int:
    """The most bytes the upload's file may have: its body's ``Content-Length`` (the file is part of
    it), at most ``limit`` (413 past it); a chunked body: ``limit``."""
    raw = request.headers.get("content-length")
    if raw is None:
        return limit
    length = int(raw)  # the HTTP parser refused one that is not a number
    if length > limit + 64 * 1024:  # the multipart envelope around the file may add up to 64 KiB
        raise file_too_large(limit)
    return min(length, limit)


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
