"""A ``multipart/form-data`` upload parsed as it arrives, its one file part written on as it comes
(to a ``FileSink``: Redis, a chunk at a time) instead of spooled: the gateway holds at most the
piece just received and one store chunk of an upload, never the file. Starlette's parser
(``python-multipart``) does the parsing, within its bounds on fields, files and a text field's size."""

from __future__ import annotations

from typing import Any, Protocol

from starlette.datastructures import FormData, Headers
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from genmesh.protocol import invalid_request


class Sink(Protocol):
    async def write(self, piece: bytes) -> None: ...


class _Part:
    """What the parser takes for an ``UploadFile``: its writes go to the sink."""

    def __init__(self, sink: Sink, filename: str | None) -> None:
        self.sink = sink
        self.filename = filename
        self.size = 0

    async def write(self, data: bytes) -> None:
        self.size += len(data)
        await self.sink.write(data)

    async def seek(self, offset: int) -> None:
        """The parser rewinds a finished file for reading; nothing to rewind here."""

    async def close(self) -> None:
        """Nothing held."""


class _StreamingParser(MultiPartParser):
    def __init__(self, sink: Sink, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sink = sink

    def on_headers_finished(self) -> None:
        super().on_headers_finished()
        part = self._current_part
        if part.file is not None:  # a file part: its bytes go to the sink (the spool it made stays empty)
            self._files_to_close_on_error.pop().close()
            part.file = _Part(self.sink, part.file.filename)  # type: ignore[assignment]


async def streamed_form(request: Request, sink: Sink, max_fields: int, max_field_bytes: int) -> FormData:
    """The form's fields; its one file part (a ``_Part`` with ``filename`` and ``size``) written to
    ``sink`` as it arrived. A malformed body: 400 naming ``file``."""
    parser = _StreamingParser(
        sink,
        Headers(scope=request.scope),
        request.stream(),
        max_files=1,
        max_fields=max_fields,
        max_part_size=max_field_bytes,
    )
    try:
        return await parser.parse()
    except MultiPartException as exc:
        raise invalid_request(f"malformed multipart body: {exc.message}", param="file") from exc
