"""uvicorn's HTTP protocol with the limits a server facing hostile clients needs.

uvicorn (httptools) parses HTTP/1.1 and offers ``timeout_keep_alive``, which we use. It has no
header size or count limit for httptools, no deadline for a request's headers or body (a
slowloris connection is held forever), a ``limit_concurrency`` whose 503 is plain text without
``Retry-After``, and no deadline on a client that stops reading a reply. This subclass adds
those, per connection and with no cost per reply chunk:

* **header deadline**: the request line and headers must arrive within ``header_timeout_s`` of
  the connection opening (or of the request's first byte on a kept-alive connection); else 408.
* **body deadline**: the body must arrive within ``body_timeout_s`` of the headers; else 408. An
  upload path's body has ``upload_timeout_s``; where the limits set ``admission_timeout_s``, it has
  only that until the app admits the request (authenticated, within its limits): the app calls
  ``scope["extensions"]["genmesh.admitted"]()`` (``admitted``), which gives it the upload's time from then.
* **a reply finished before its request's body is in closes the connection**: a refusal (401, 429,
  413, ...) reads none of the body it refused, and nothing is written after it.
* **header limits**: more than ``max_header_bytes`` of request line and headers, or more than
  ``max_header_count`` headers: 431.
* **body size**: a ``Content-Length`` past ``max_body_bytes`` is answered 413 before any of the
  body is read (a chunked body is counted as it streams in: ``BodyLimitMiddleware``).
* **connections**: past ``max_client_connections`` open connections, a new one's request gets
  503 with ``Retry-After`` at once.
* **send deadline**: the kernel send buffer is bounded (``send_buffer_bytes``) and so is the
  transport's; when a client takes nothing of the reply while the buffer stays full for
  ``send_timeout_s``, the connection is aborted. The app sees the client disconnect, so it
  cancels its upstream request (the engine stops generating) and gives back its slot.
* **an unfinished reply to a client that is behind is aborted**: when the app gives up on a reply
  it has begun (a request deadline passed while the client took nothing) and the transport's
  buffer is above its high-water mark, the connection is aborted at once rather than closed
  (a close would wait, up to ``send_timeout_s``, for the client to take the buffered bytes).

Every refusal is OpenAI error JSON, or TEI's and TGI's error JSON on their paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from collections.abc import Callable, MutableMapping
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..errors import OpenAIError, service_unavailable
from ..native_errors import native_body, refuses_natively
from .limits import HttpLimits

log = logging.getLogger("genmesh.http")


def error_bytes(err: OpenAIError, path: str) -> bytes:
    """A refusal's body: OpenAI's error, TEI's and TGI's on their paths (``refuses_natively``)."""
    return orjson.dumps(native_body(err) if refuses_natively(path) else err.body())


def refusal_app(err: OpenAIError, path: str) -> Any:
    """An ASGI app that answers ``err`` without reading the body, and closes the connection."""
    body = error_bytes(err, path)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"connection", b"close"),
        *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in err.headers.items()),
    ]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": err.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def _raw_response(err: OpenAIError, path: str) -> bytes:
    body = error_bytes(err, path)
    head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
    return head % (err.status, _REASONS.get(err.status, b"Error"), len(body)) + body


_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 413: b"Content Too Large", 431: b"Headers Too Large"}


def request_timeout(what: str, seconds: float) -> OpenAIError:
    return OpenAIError(f"the request's {what} did not arrive within {seconds:g} s", status=408, code="request_timeout")


def too_large(max_bytes: int) -> OpenAIError:
    return OpenAIError(
        f"the request body is larger than this server's limit of {max_bytes} bytes",
        status=413,
        code="request_too_large",
    )


def headers_too_large(detail: str) -> OpenAIError:
    return OpenAIError(f"request headers too large: {detail}", status=431, code="headers_too_large")


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    limits: HttpLimits = HttpLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_what = ""  # what the armed deadline is for: "headers" or "body"
        self._send_timer: asyncio.TimerHandle | None = None
        self._in_head = True
        self._head_bytes = 0
        self._header_count = 0
        self._parsed_bytes = 0  # request line and headers, as the parser hands them over
        self._refusal: OpenAIError | None = None
        self._path = b""  # the request's URL as parsed so far (limits may differ per path)

    # connection
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        lim = self.limits
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # not a TCP socket: nothing to bound
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, lim.send_buffer_bytes)
        transport.set_write_buffer_limits(high=lim.send_buffer_bytes // 2, low=lim.send_buffer_bytes // 8)
        if len(self.connections) > lim.max_client_connections:
            self._refusal = service_unavailable(
                f"this server has {lim.max_client_connections} connections open, its limit", code="too_many_connections"
            )
        self._arm("headers", lim.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._disarm_send()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > self.limits.max_header_bytes and not self.transport.is_closing():
            self._refuse_raw(headers_too_large(f"more than {self.limits.max_header_bytes} bytes"))

    # parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._in_head:  # a new request on a kept-alive connection
            self._in_head = True
            self._head_bytes = 0
            self._header_count = 0
            self._parsed_bytes = 0
            self._path = b""
            self._arm("headers", self.limits.header_timeout_s)

    def on_url(self, url: bytes) -> None:
        self._parsed_bytes += len(url)
        if len(self._path) < 256:
            self._path += url
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._parsed_bytes += len(name) + len(value) + 4
        lim = self.limits
        if self._refusal is None and self._header_count > lim.max_header_count:
            self._refusal = headers_too_large(f"more than {lim.max_header_count} headers")
        if self._refusal is None and self._parsed_bytes > lim.max_header_bytes:
            self._refusal = headers_too_large(f"more than {lim.max_header_bytes} bytes")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        refusal = self._refusal or self._body_refusal()
        path = self._url_path()
        full, first = self.limits.body_time(path), self.limits.unadmitted_body_time(path)
        self._arm("body", first)
        if first < full:  # the rest of the upload's time once the app has admitted it
            extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
            extensions[ADMITTED] = functools.partial(self._admitted, self.scope, full)
        if refusal is None:
            super().on_headers_complete()
            return
        self._refusal = None
        app, self.app = self.app, refusal_app(refusal, path)
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        cycle = self.cycle
        if cycle is not None and cycle.more_body and not self.transport.is_closing():
            # answered before its body was in (a refusal): close rather than read the rest of it
            self._disarm()
            self.transport.close()
        super().on_response_complete()

    def _admitted(self, scope: Any, seconds: float) -> None:
        """The app admitted the request of ``scope``: its body has ``seconds`` more to arrive."""
        cycle = self.cycle
        if cycle is not None and cycle.scope is scope and cycle.more_body and self._timer_what == "body":
            self._arm("body", seconds)

    def _body_refusal(self) -> OpenAIError | None:
        for name, value in self.headers:
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    return None  # the parser refuses it
                limit = self.limits.body_limit(self._url_path())
                if length > limit:
                    return too_large(limit)
        return None

    def _url_path(self) -> str:
        return self._path.split(b"?", 1)[0].decode("latin-1")

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        async def guarded(scope: Any, receive: Any, send: Any) -> None:
            try:
                await app(scope, receive, send)
            finally:
                unfinished = cycle.response_started and not cycle.response_complete and not cycle.disconnected
                if unfinished and self.flow.write_paused:  # the client is behind: nothing more reaches it in time
                    cycle.disconnected = True
                    self.transport.abort()

        super()._start_asgi_task(cycle, guarded)

    def send_400_response(self, msg: str) -> None:
        """Malformed HTTP: OpenAI error JSON, not uvicorn's plain text."""
        self._refuse_raw(OpenAIError(msg, status=400, code="invalid_http"))

    # deadlines
    def _arm(self, what: str, seconds: float) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._timed_out, what, seconds)
        self._timer_what = what

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_what = ""

    def _timed_out(self, what: str, seconds: float) -> None:
        self._timer = None
        self._timer_what = ""
        if self.transport.is_closing():
            return
        if what == "headers" and self._head_bytes == 0 and self.cycle is None:
            self.transport.close()  # a connection that never sent a byte: nothing to answer
            return
        log.warning("closing a connection whose %s took longer than %g s", what, seconds)
        self._refuse_raw(request_timeout(what, seconds))

    def _refuse_raw(self, err: OpenAIError) -> None:
        """Answer ``err`` (unless a reply has begun, or is finished) and close, whatever the app is doing."""
        self._disarm()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app's own reply, if it comes, goes nowhere
        if cycle is None or not cycle.response_started:  # never a second answer after the app's
            self.transport.write(_raw_response(err, self._url_path()))
        self.transport.close()

    # the send deadline: the transport's buffer stays above its high-water mark
    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(self.limits.send_timeout_s, self._send_timed_out)

    def resume_writing(self) -> None:
        self._disarm_send()
        super().resume_writing()

    def _disarm_send(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_timed_out(self) -> None:
        self._send_timer = None
        log.warning("client took nothing of its reply for %g s: connection aborted", self.limits.send_timeout_s)
        self.transport.abort()


ADMITTED = "genmesh.admitted"


def admitted(scope: MutableMapping[str, Any]) -> None:
    """Tell the server that the request of ``scope`` is admitted (authenticated, within its limits):
    an upload's body gets its full time from now (``admission_timeout_s`` until then; nothing on
    other paths or servers)."""
    extend: Callable[[], None] | None = scope.get("extensions", {}).get(ADMITTED)
    if extend is not None:
        extend()


def protocol_class(limits: HttpLimits) -> type[LimitedHttpToolsProtocol]:
    """The protocol class uvicorn instantiates per connection, bound to these limits."""
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})
