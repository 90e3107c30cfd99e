"""A client's request body, read as it arrives and counted against its cap as it comes (413 past it;
``Content-Length`` is checked before, by ``http_server``)."""

from __future__ import annotations

from starlette.types import Receive

from genmesh.protocol.server.http_server import too_large

from .errors import ClientGone


async def read_body(receive: Receive, max_body: int) -> bytes:
    """The whole body; ``ClientGone`` if the client leaves before it is in."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_body:
            raise too_large(max_body)
        chunks.append(chunk)
        if not message.get("more_body"):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
