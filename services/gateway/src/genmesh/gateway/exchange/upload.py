"""A transcription's upload, relayed upstream as it arrives once admitted (issue 55): the gateway holds
at most one piece of it in memory (the piece read last, or the one being sent upstream), never the file.

The multipart form is watched as it passes, by python-multipart's push parser (``FormWatcher``): the text
fields come out (the ``model`` that picks the queue among them), the file part is counted against the
audio limit (413 naming ``file``), a malformed body is a 400 naming ``file``. What is read before the file
begins (the text fields and the piece that begins the file, at most ``HEAD_BYTES`` + one piece) is held
until the upload goes upstream. A form whose ``model`` comes after its file (``curl -F file=@… -F
model=…``) is spooled to a temporary file first (``spool``: written by a thread, at most the body's
limit), so that the model is known before the queue; the upload then goes upstream from the file, a
chunk at a time.

Replay: an upload may go to another upstream (a connect failure) only while none of it has been sent
(``replayable``); a spooled one always may. The client's own faults on the way (past the limit, gone,
malformed) are kept in ``error`` for the caller to answer, not blamed on the upstream.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from typing import IO

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.types import Receive

from genmesh.protocol import OpenAIError, file_too_large, invalid_request
from genmesh.protocol.server.audio_form import MAX_FIELD_BYTES, MAX_FIELDS
from genmesh.protocol.server.http_server import too_large

from .errors import ClientGone

HEAD_BYTES = 64 * 1024  # the most of a form read before its file begins (the body may be 64 KiB more than its file)
SPOOL_CHUNK_BYTES = 256 * 1024  # a spooled upload goes upstream in pieces of this size


class FormWatcher:
    """A ``multipart/form-data`` body fed piece by piece: its text fields (``fields``, each at most
    ``MAX_FIELD_BYTES``, at most ``MAX_FIELDS``), whether its file part has begun and how large it is
    (past ``file_limit``: 413 naming ``file``)."""

    def __init__(self, content_type: str, file_limit: int) -> None:
        kind, params = parse_options_header(content_type)
        boundary = params.get(b"boundary")
        if kind != b"multipart/form-data" or not boundary:
            raise invalid_request("send the audio as multipart/form-data with a 'file' field", param="file")
        self.file_limit = file_limit
        self.fields: dict[str, str] = {}
        self.file_started = False
        self.file_bytes = 0
        self._parts = 0
        self._header = b""
        self._headers: dict[bytes, bytes] = {}
        self._name = ""
        self._in_file = False
        self._value = bytearray()
        self._fault: Exception | None = None
        self._parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._part_begin,
                "on_header_field": self._header_field,
                "on_header_value": self._header_value,
                "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished,
                "on_part_data": self._part_data,
                "on_part_end": self._part_end,
            },
        )

    def feed(self, piece: bytes) -> None:
        try:
            self._parser.write(piece)
        except MultipartParseError as exc:
            raise invalid_request(f"malformed multipart body: {exc}", param="file") from None
        if self._fault is not None:
            raise self._fault

    def end(self) -> None:
        """The body is in: 400 naming ``file`` when the form had none."""
        self._parser.finalize()
        if not self.file_started:
            raise invalid_request("missing required parameter: 'file' (an audio file)", param="file")

    def _part_begin(self) -> None:
        self._parts += 1
        self._headers = {}
        self._value.clear()
        if self._parts > MAX_FIELDS + 1 and self._fault is None:
            self._fault = invalid_request(f"the form has more than {MAX_FIELDS} fields", param="file")

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._headers[self._header.lower()] = self._headers.get(self._header.lower(), b"") + data[start:end]

    def _header_end(self) -> None:
        self._header = b""

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        self._name = options.get(b"name", b"").decode("latin-1")
        self._in_file = b"filename" in options
        if self._in_file:
            if self.file_started and self._fault is None:
                self._fault = invalid_request("the form has more than one file", param="file")
            self.file_started = True

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._in_file:
            self.file_bytes += end - start
            if self.file_bytes > self.file_limit and self._fault is None:
                self._fault = file_too_large(self.file_limit, "audio file")
        elif len(self._value) + end - start > MAX_FIELD_BYTES:
            if self._fault is None:
                self._fault = invalid_request(f"the form field '{self._name[:100]}' is too large", param="file")
        else:
            self._value += data[start:end]

    def _part_end(self) -> None:
        if not self._in_file and self._fault is None:
            self.fields[self._name] = self._value.decode("utf-8", errors="replace")


class Upload:
    """The body of one transcription, read from the client's ``receive`` as it is relayed."""

    def __init__(self, receive: Receive, content_type: str, max_body: int, file_limit: int) -> None:
        self.receive = receive
        self.max_body = max_body
        self.form = FormWatcher(content_type, file_limit)
        self.size = 0  # the body's bytes read so far
        self.held: list[bytes] = []  # read and not yet sent upstream (the form's head)
        self.ended = asyncio.Event()  # its last piece is read: the client's channel is free for others
        self.sent = False  # a piece of it went upstream
        self.error: BaseException | None = None  # the client's fault met while relaying it
        self.spooled: IO[bytes] | None = None

    async def _next(self) -> bytes:
        message = await self.receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        piece: bytes = message.get("body", b"")
        self.size += len(piece)
        self.form.feed(piece)  # first: a file past its limit is named as such (413 naming ``file``)
        if self.size > self.max_body:
            raise too_large(self.max_body)
        if not message.get("more_body"):
            self.form.end()
            self.ended.set()
        return piece

    async def head(self) -> dict[str, str]:
        """Read the form up to its file's first bytes (or its end) and hold that: the text fields before
        the file (all of them, when the body ended)."""
        held = 0
        while not self.ended.is_set() and not self.form.file_started:
            if held > HEAD_BYTES:
                message = f"the form's fields before 'file' take more than {HEAD_BYTES} bytes"
                raise invalid_request(message, param="file")
            piece = await self._next()
            held += len(piece)
            self.held.append(piece)
        return self.form.fields

    async def spool(self) -> dict[str, str]:
        """The rest of the body, to a temporary file (a thread writes it; at most ``max_body`` bytes):
        for a form whose ``model`` comes after its file. Its fields, all of them."""
        self.spooled = spooled = await asyncio.to_thread(tempfile.TemporaryFile)
        pieces, self.held = self.held, []
        await asyncio.to_thread(spooled.writelines, pieces)
        del pieces
        while not self.ended.is_set():
            piece = await self._next()
            await asyncio.to_thread(spooled.write, piece)
        return self.form.fields

    def replayable(self) -> bool:
        """Whether it may still be sent to another upstream: none of it has gone, or it is spooled."""
        return self.spooled is not None or not self.sent

    async def pieces(self) -> AsyncIterator[bytes]:
        """What goes upstream: the spool a chunk at a time, or the held head and then the rest as it
        arrives. A fault of the client's on the way is kept in ``error`` and raised."""
        try:
            if self.spooled is not None:
                await asyncio.to_thread(self.spooled.seek, 0)
                while piece := await asyncio.to_thread(self.spooled.read, SPOOL_CHUNK_BYTES):
                    self.sent = True
                    yield piece
                return
            while self.held:
                self.sent = True
                yield self.held.pop(0)
            while not self.ended.is_set():
                piece = await self._next()
                self.sent = True
                yield piece
        except (OpenAIError, ClientGone) as exc:
            self.error = exc
            raise

    async def close(self) -> None:
        self.held = []
        if self.spooled is not None:
            await asyncio.to_thread(self.spooled.close)
