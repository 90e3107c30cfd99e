"""A lean HTTP/1.1 client for the relay path: keep-alive pool per origin, TCP_NODELAY, httptools.

Why not httpx here: on this class of machine one ``httpx.AsyncClient.send`` + streamed read of a
tiny reply costs ~1 ms of CPU (request/URL/header models, the httpcore pool's locks and
per-request state machines), a third of the whole gateway's cost per request in the
queue benchmark. The relay needs much less: one POST of bytes it already has, the status and
headers, then body chunks as they arrive, and closing the connection to abort. This client
does that in one write and a C parser (``httptools``, already installed with
``uvicorn[standard]``), with no task per request and no timer per chunk (a deadline costs one
timer handle, and only while a read actually waits). httpx is still used for health probes.

Aborting a response closes its connection, so the upstream sees the client go and stops
generating. A connection is reused only after a complete response that allowed keep-alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections import deque
from typing import cast
from urllib.parse import urlsplit

import httptools

_MAX_BUFFER = 1024 * 1024  # pause reading from the upstream beyond this much unread body


class UpstreamError(Exception):
    """The upstream exchange failed."""


class UpstreamConnectError(UpstreamError):
    """No connection could be made: nothing was sent, so another upstream may be tried."""


class UpstreamProtocolError(UpstreamError):
    """The connection broke or the reply was not HTTP we understand."""


class UpstreamAborted(UpstreamError):
    """The response was aborted (closed) while it was being read."""


class _Conn(asyncio.Protocol):
    """One keep-alive connection; parses one response at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.complete = False
        self.keep_alive = True
        self.received = False
        self.error: UpstreamError | None = None
        self.headers_done: asyncio.Future[None] | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.until_close = False

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamProtocolError(f"bad HTTP from upstream: {exc}"))
            self.close()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.complete:
            return
        if self.until_close and self.headers_done is not None and self.headers_done.done():
            self.on_message_complete()  # a body delimited by the connection's end
            return
        self._fail(UpstreamProtocolError("upstream closed the connection" + (f": {exc}" if exc else "")))

    def pause_writing(self) -> None:  # requests are small; nothing to do
        pass

    def resume_writing(self) -> None:
        pass

    # -- httptools callbacks -------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        names = {n for n, _ in self.headers}
        self.until_close = b"content-length" not in names and b"transfer-encoding" not in names
        if self.headers_done is not None and not self.headers_done.done():
            self.headers_done.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _MAX_BUFFER and self.transport is not None:
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        if self.headers_done is not None and not self.headers_done.done():
            self.headers_done.set_result(None)
        self._wake()

    # -- helpers ---------------------------------------------------------------------------------

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _fail(self, error: UpstreamError) -> None:
        if self.error is None:
            self.error = error
        if self.headers_done is not None and not self.headers_done.done():
            self.headers_done.set_exception(error)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(error)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed and self.error is None


class UpstreamResponse:
    """Status and headers of an upstream reply; the body is read with ``read``."""

    def __init__(self, conn: _Conn, client: HttpClient, origin: tuple[str, str, int]) -> None:
        self._conn = conn
        self._client = client
        self._origin = origin
        self.status = conn.status
        self.headers = conn.headers
        self._closed = False

    def header(self, name: bytes) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    async def read(self, deadline: float | None = None) -> bytes:
        """Everything received since the last read (b"" at the end); ``TimeoutError`` past ``deadline``
        (a ``time.monotonic()`` value)."""
        conn = self._conn
        while True:
            if conn.chunks:
                data = b"".join(conn.chunks) if len(conn.chunks) > 1 else conn.chunks[0]
                conn.chunks.clear()
                if conn.buffered > _MAX_BUFFER and conn.transport is not None:
                    conn.transport.resume_reading()
                conn.buffered = 0
                return data
            if conn.complete:
                return b""
            if conn.error is not None:
                raise conn.error
            if self._closed:
                raise UpstreamAborted("response closed")
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[None] = loop.create_future()
            conn.waiter = waiter
            timer = None
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                timer = loop.call_later(remaining, _expire, waiter)
            try:
                await waiter
            finally:
                conn.waiter = None
                if timer is not None:
                    timer.cancel()

    def abort(self) -> None:
        """Close the connection now (the upstream sees the client leave)."""
        if not self._closed:
            self._closed = True
            self._conn._fail(UpstreamAborted("response closed"))
            self._conn.close()

    def close(self) -> None:
        """Done with this response: keep the connection if the reply ended cleanly, else close it."""
        if self._closed:
            return
        self._closed = True
        if self._conn.reusable():
            self._client._put(self._origin, self._conn)
        else:
            self._conn.close()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class HttpClient:
    """Keep-alive connections per origin (``max_idle`` kept per origin); no limit on how many are open."""

    def __init__(self, connect_timeout_s: float, max_idle: int = 64) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.max_idle = max_idle
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._origins: dict[str, tuple[str, str, int, bytes, str]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    def _origin(self, base_url: str) -> tuple[str, str, int, bytes, str]:
        hit = self._origins.get(base_url)
        if hit is None:
            parts = urlsplit(base_url)
            scheme = parts.scheme
            host = parts.hostname or "127.0.0.1"
            port = parts.port or (443 if scheme == "https" else 80)
            prefix = parts.path.rstrip("/")
            hit = (scheme, host, port, parts.netloc.encode("idna"), prefix)
            self._origins[base_url] = hit
        return hit

    async def post(self, base_url: str, path: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> UpstreamResponse:
        """Send a POST and return once the status and headers are in (wrap in a timeout as needed)."""
        scheme, host, port, netloc, prefix = self._origin(base_url)
        origin = (scheme, host, port)
        head = [b"POST ", (prefix + path).encode(), b" HTTP/1.1\r\nhost: ", netloc]
        head.append(b"\r\ncontent-length: %d\r\n" % len(body))
        for k, v in headers:
            head += (k, b": ", v, b"\r\n")
        head.append(b"\r\n")
        request = b"".join(head) + body
        for attempt in range(2):
            conn, reused = self._take(origin)
            if conn is None:
                conn = await self._connect(scheme, host, port)
            conn._reset()
            loop = asyncio.get_running_loop()
            conn.headers_done = loop.create_future()
            assert conn.transport is not None
            conn.transport.write(request)
            try:
                await conn.headers_done
            except UpstreamProtocolError:
                conn.close()
                if reused and attempt == 0 and not conn.received:
                    continue  # a kept-alive connection the upstream had just closed: once more, fresh
                raise
            except BaseException:
                conn.close()
                raise
            return UpstreamResponse(conn, self, origin)
        raise UpstreamProtocolError("unreachable")  # pragma: no cover

    def _take(self, origin: tuple[str, str, int]) -> tuple[_Conn | None, bool]:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn, True
        return None, False

    def _put(self, origin: tuple[str, str, int], conn: _Conn) -> None:
        idle = self._idle.setdefault(origin, [])
        if self._closed or len(idle) >= self.max_idle:
            conn.close()
        else:
            idle.append(conn)

    async def _connect(self, scheme: str, host: str, port: int) -> _Conn:
        loop = asyncio.get_running_loop()
        ctx = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ctx = self._ssl
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(_Conn, host, port, ssl=ctx)
        except TimeoutError as exc:
            raise UpstreamConnectError(f"connect to {host}:{port} timed out") from exc
        except OSError as exc:
            raise UpstreamConnectError(f"connect to {host}:{port} failed: {exc}") from exc
        return conn

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
