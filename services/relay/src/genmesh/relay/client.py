"""The relay path's HTTP client: a thin layer over one ``aiohttp.ClientSession``.

aiohttp does the HTTP/1.1 work (keep-alive pool per origin, TCP_NODELAY, its C parser); this
module only fixes what the routes rely on:

* ``post`` returns once the status and headers are in; a failure to *connect* raises
  ``UpstreamConnectError`` (nothing was sent, so another upstream may be tried), any later failure
  ``UpstreamProtocolError``. aiohttp never resends a POST on a reused connection the upstream had
  just closed (it retries only idempotent methods), and neither does this module. To keep that race
  rare, idle connections are dropped after ``keepalive_s``, below uvicorn's default of 5 s.
* ``UpstreamResponse.read(deadline)`` gives the body as it arrives, with one deadline per read;
  a stream's reads share one deadline, so one timer per response serves them all (set again only
  when the deadline changes), not one per read that waits; ``abort`` closes the connection so that the upstream
  sees the client go and stops generating; ``close`` hands a cleanly finished connection back.
* Nothing is added or changed on the way: no ``Accept-Encoding`` or ``User-Agent`` of ours, no
  decompression, no cookies kept between requests, no redirects followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterable, Callable
from typing import Any

import aiohttp
from yarl import URL


class UpstreamError(Exception):
    """The upstream exchange failed."""


class UpstreamConnectError(UpstreamError):
    """No connection could be made: nothing was sent, so another upstream may be tried."""


class UpstreamProtocolError(UpstreamError):
    """The connection broke or the reply was not HTTP we understand."""


class UpstreamAborted(UpstreamError):
    """The response was aborted (closed) while it was being read."""


_CONNECT_ERRORS = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


class UpstreamResponse:
    """Status and headers (names lower-case) of an upstream reply; the body is read with ``read``."""

    __slots__ = (
        "_closed",
        "_content",
        "_deadline",
        "_expired",
        "_peeked",
        "_resp",
        "_timer",
        "_waiting",
        "headers",
        "status",
    )

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self._content = resp.content
        self._closed = False
        self._deadline: float | None = None  # what the timer is set for
        self._timer: asyncio.TimerHandle | None = None
        self._waiting: asyncio.Task[Any] | None = None  # the task in a read that waits for data
        self._expired = False  # the timer cancelled that read
        self._peeked = b""  # read by ``peek``, handed out first by ``read``
        self.status = resp.status
        self.headers = [(k.lower(), v) for k, v in resp.raw_headers]

    def header(self, name: bytes) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    async def peek(self, limit: int, deadline: float) -> bytes:
        """The body's first bytes, up to ``limit`` (all of a short one), left for ``read`` to hand out
        again; what came by ``deadline`` when the rest is slow."""
        while len(self._peeked) < limit:
            try:
                data = await self._read(deadline)
            except TimeoutError:
                break
            if not data:
                break
            self._peeked += data
        return self._peeked[:limit]

    async def read(self, deadline: float | None = None) -> bytes:
        """Everything received since the last read (b"" at the end); ``TimeoutError`` past ``deadline``
        (a ``time.monotonic()`` value)."""
        if self._peeked:
            data, self._peeked = self._peeked, b""
            return data
        return await self._read(deadline)

    async def _read(self, deadline: float | None) -> bytes:
        if self._closed:
            raise UpstreamAborted("response closed")
        content = self._content
        try:
            if deadline is None:
                return await content.readany()
            if deadline != self._deadline:
                self._set_timer(deadline)
            elif self._timer is None:  # this deadline's timer has fired: what is buffered, else the timeout
                data = content.read_nowait()
                if data or content.at_eof():
                    return data
                raise TimeoutError
            return await self._wait(content)  # (returns at once what is already buffered)
        except TimeoutError:  # a subclass of OSError: ours, not a broken connection
            raise
        except (aiohttp.ClientError, OSError) as exc:
            if self._closed:
                raise UpstreamAborted("response closed") from exc
            raise UpstreamProtocolError(f"upstream stream failed: {type(exc).__name__}: {exc}") from exc

    async def _wait(self, content: aiohttp.StreamReader) -> bytes:
        """``readany``, cancelled by the timer (``TimeoutError``) if the deadline passes first."""
        task = asyncio.current_task()
        self._waiting = task
        try:
            return await content.readany()
        except asyncio.CancelledError:
            if self._expired and task is not None and task.uncancel() == 0:
                raise TimeoutError from None  # our timer's cancel alone
            raise
        finally:
            self._waiting = None
            self._expired = False

    def _set_timer(self, deadline: float) -> None:
        """One timer per deadline, not one per read (a deadline already past fires at once)."""
        if self._timer is not None:
            self._timer.cancel()
        self._deadline = deadline
        self._timer = asyncio.get_running_loop().call_at(deadline, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self._waiting is not None and not self._expired:
            self._expired = True
            self._waiting.cancel()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def abort(self) -> None:
        """Close the connection now (the upstream sees the client leave)."""
        if not self._closed:
            self._closed = True
            self._stop_timer()
            self._resp.close()

    def close(self) -> None:
        """Done with this response: aiohttp keeps the connection if the reply ended cleanly, else closes it."""
        if not self._closed:
            self._closed = True
            self._stop_timer()
            self._resp.release()


def bounded_connector(limit: int, keepalive_s: float, receive_buffer_bytes: int | None) -> aiohttp.TCPConnector:
    """aiohttp's connector with each upstream socket's receive buffer bounded (the kernel otherwise
    grows it to megabytes): with aiohttp's own read buffer bounded too (``READ_BUFSIZE``), a stream
    whose client stops reading holds a few events per hop, not megabytes."""
    factory: Callable[[Any], socket.socket] | None = None
    if receive_buffer_bytes is not None:

        def factory(addr_info: Any) -> socket.socket:
            family, kind, proto, _, _ = addr_info
            sock = socket.socket(family=family, type=kind, proto=proto)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
            return sock

    return aiohttp.TCPConnector(limit=limit, limit_per_host=0, keepalive_timeout=keepalive_s, socket_factory=factory)


READ_BUFSIZE = 16384  # aiohttp pauses reading an upstream past twice this, unread


class RelayClient:
    """One ``aiohttp.ClientSession`` (created on first use, inside the running loop).

    The connector sets no limit on open connections: the gateway's admission already bounds
    requests per upstream (``max_concurrency`` slots), and a second bound here could only make a
    request that holds a slot wait for a connection.
    """

    def __init__(
        self, connect_timeout_s: float, keepalive_s: float = 4.0, receive_buffer_bytes: int | None = None
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self.receive_buffer_bytes = receive_buffer_bytes
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[tuple[str, str], URL] = {}

    def _open(self) -> aiohttp.ClientSession:
        connector = bounded_connector(0, self.keepalive_s, self.receive_buffer_bytes)
        self._session = aiohttp.ClientSession(
            connector=connector,
            read_bufsize=READ_BUFSIZE,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s),
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent"),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        return self._session

    def _url(self, base_url: str, path: str) -> URL:
        url = self._urls.get((base_url, path))
        if url is None:
            url = self._urls[(base_url, path)] = URL(base_url.rstrip("/") + path)
        return url

    async def post(
        self, base_url: str, path: str, body: bytes | AsyncIterable[bytes], headers: list[tuple[bytes, bytes]]
    ) -> UpstreamResponse:
        """Send a POST and return once the status and headers are in (wrap in a timeout as needed).

        ``body``: the bytes, or an async iterable of pieces sent as they come (chunked), each taken
        only when the connection has sent the one before it (a slow upstream slows the reading of
        the pieces, so a relayed upload holds one piece here). A failure of the iterable itself
        surfaces as ``UpstreamProtocolError``, unless the upstream has answered already; the
        iterable's owner knows its own error (``UpstreamConnectError``: it was never iterated)."""
        session = self._session or self._open()
        try:
            resp = await session.post(
                self._url(base_url, path),
                data=body,
                headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers],
                allow_redirects=False,
            )
        except _CONNECT_ERRORS as exc:
            raise UpstreamConnectError(f"connect to {base_url} failed: {type(exc).__name__}: {exc}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamProtocolError(f"upstream request failed: {type(exc).__name__}: {exc}") from exc
        return UpstreamResponse(resp)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
