"""The relay client's contract with the routes, against tiny raw-socket upstreams.

What the routes rely on: a connect failure is told apart from a failure after the request went
out (only the former is retried elsewhere), a POST is never sent twice, body chunks come as they
arrive with a deadline per read, and aborting a response closes the upstream connection.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from genmesh.relay.client import (
    RelayClient,
    UpstreamConnectError,
    UpstreamProtocolError,
    UpstreamResponse,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HEADERS = [(b"content-type", b"application/json"), (b"x-request-id", b"rid-1")]


@asynccontextmanager
async def upstream(handler: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(v) for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n")) if k.lower() == b"content-length"
    )
    return head, await reader.readexactly(length)


async def read_all(resp: UpstreamResponse, deadline: float | None = None) -> bytes:
    chunks = []
    while chunk := await resp.read(deadline):
        chunks.append(chunk)
    return b"".join(chunks)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_post_relays_status_headers_body_and_reuses_the_connection() -> None:
    seen: list[tuple[bytes, bytes]] = []
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                head, body = await read_request(reader)
            except asyncio.IncompleteReadError:
                break
            seen.append((head, body))
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nX-Custom: a\r\ncontent-length: 2\r\n\r\n{}"
            )
            await writer.drain()
        writer.close()

    client = RelayClient(connect_timeout_s=2)
    try:
        async with upstream(handler) as url:
            for _ in range(3):
                resp = await client.post(url, "/v1/chat/completions", b'{"a":1}', HEADERS)
                assert resp.status == 200
                assert resp.header(b"x-custom") == b"a"  # names come lower-case
                assert await read_all(resp) == b"{}"
                resp.close()
    finally:
        await client.aclose()
    assert connections == 1
    head, body = seen[0]
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert body == b'{"a":1}'
    lower = head.lower()
    assert b"x-request-id: rid-1" in lower
    assert b"accept-encoding" not in lower
    assert b"user-agent" not in lower


async def test_refused_connection_is_a_connect_error() -> None:
    client = RelayClient(connect_timeout_s=2)
    try:
        with pytest.raises(UpstreamConnectError):
            await client.post(f"http://127.0.0.1:{free_port()}", "/v1/completions", b"{}", HEADERS)
    finally:
        await client.aclose()


async def test_connection_dropped_after_the_request_is_not_a_connect_error_and_not_resent() -> None:
    requests = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        await read_request(reader)
        requests += 1
        if requests == 1:  # the first reply allows keep-alive; the second request finds it dropped
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
            await read_request(reader)
            requests += 1
        writer.close()

    client = RelayClient(connect_timeout_s=2)
    try:
        async with upstream(handler) as url:
            first = await client.post(url, "/v1/completions", b"{}", HEADERS)
            assert await read_all(first) == b""
            first.close()
            with pytest.raises(UpstreamProtocolError):
                await client.post(url, "/v1/completions", b"{}", HEADERS)
    finally:
        await client.aclose()
    # No wait needed: the client raised only after the upstream closed a connection, and the
    # handler counts a request before it closes; a resend would have been counted (3) by then.
    assert requests == 2  # the POST that may have reached the upstream was not sent again


async def test_chunks_arrive_as_sent_with_a_deadline_and_abort_closes_the_connection() -> None:
    closed = asyncio.Event()
    go_on = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b"7\r\ndata: 1\r\n")
        await writer.drain()
        await go_on.wait()
        writer.write(b"7\r\ndata: 2\r\n")
        await writer.drain()
        if await reader.read() == b"":  # the gateway closed the connection
            closed.set()

    client = RelayClient(connect_timeout_s=2)
    try:
        async with upstream(handler) as url:
            resp = await client.post(url, "/v1/chat/completions", b"{}", HEADERS)
            assert await resp.read(time.monotonic() + 5) == b"data: 1"
            with pytest.raises(TimeoutError):
                await resp.read(time.monotonic() + 0.2)
            go_on.set()
            assert await resp.read(time.monotonic() + 5) == b"data: 2"
            resp.abort()
            await asyncio.wait_for(closed.wait(), 5)
    finally:
        await client.aclose()


async def test_a_streamed_body_goes_chunked_a_piece_at_a_time_as_the_upstream_takes_it() -> None:
    """An async iterable body: sent chunked, byte for byte, each piece taken from the iterable only once
    the connection has room for it (an upstream that reads nothing for a while holds the iterable at
    a few pieces, not all 64 MiB); a failure of the iterable itself is not a connect error."""
    piece = bytes(range(256)) * 4096  # 1 MiB
    taken = 0
    reading = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        nonlocal taken
        for _ in range(64):
            taken += 1
            yield piece

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head.lower()
        await reading.wait()
        size = 0
        while (line := await reader.readline()) not in (b"0\r\n", b""):
            n = int(line.strip(), 16)
            chunk = await reader.readexactly(n + 2)
            assert chunk[:n] == piece[:n]
            size += n
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%d" % (len(str(size)), size))
        await writer.drain()
        writer.close()

    client = RelayClient(connect_timeout_s=2, receive_buffer_bytes=16384)
    try:
        async with upstream(handler) as url:
            sending = asyncio.ensure_future(client.post(url, "/v1/audio/transcriptions", body(), HEADERS))
            await asyncio.sleep(0.5)  # the upstream reads nothing meanwhile: what the client takes is bounded
            held = taken
            reading.set()
            resp = await sending
            assert resp.status == 200
            assert await read_all(resp) == str(64 * len(piece)).encode()
            resp.close()

            async def failing() -> AsyncIterator[bytes]:
                yield piece
                raise RuntimeError("the client's body failed")

            with pytest.raises(UpstreamProtocolError):
                await client.post(url, "/v1/audio/transcriptions", failing(), HEADERS)
    finally:
        await client.aclose()
    assert held < 16, held
