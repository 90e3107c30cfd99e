"""The multipart body of ``POST /v1/audio/transcriptions``, as OpenAI defines it: one ``file`` and
text fields, parsed within bounds (``MAX_FIELDS`` fields, ``MAX_FIELD_BYTES`` a text field). The
engine (which reads the file) and the gateway (which passes it on untouched) read it alike: a 400
naming ``file`` when the body is malformed or has no file, a 413 naming it past the server's limit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request

from ..errors import invalid_request

MAX_FIELDS = 16
MAX_FIELD_BYTES = 64 * 1024


@asynccontextmanager
async def audio_form(request: Request) -> AsyncIterator[tuple[UploadFile, list[tuple[str, str]]]]:
    """The form's file and its text fields (in order), while the form is open."""
    try:
        form = await request.form(max_files=1, max_fields=MAX_FIELDS, max_part_size=MAX_FIELD_BYTES)
    except MultiPartException as exc:
        raise invalid_request(f"malformed multipart body: {exc.message}", param="file") from exc
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise invalid_request("missing required parameter: 'file' (an audio file)", param="file")
        yield upload, [(k, v) for k, v in form.multi_items() if isinstance(v, str)]
    finally:
        await form.close()
