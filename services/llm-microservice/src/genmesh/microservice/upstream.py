"""The one HTTP client to the engine: timeouts, credentials, request ids, and transport errors as OpenAI errors.

One ``aiohttp.ClientSession`` per process (its keep-alive pool, TCP_NODELAY and C parser are
what keep the relay cheap per token). Nothing is added on the way: no ``Accept-Encoding``, no
decompression, no cookies kept, no redirects followed, no proxy or netrc read from the
environment; the engine's bytes are relayed as they come.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import AsyncIterable, Awaitable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from genmesh.protocol import OpenAIError, service_unavailable
from genmesh.protocol.server.tracing import inject
from genmesh.relay.client import READ_BUFSIZE, bounded_connector

from .settings import MicroserviceSettings

log = logging.getLogger("genmesh.microservice.upstream")

# Upstream response headers worth handing to our client (Retry-After: when a restarting engine
# expects to serve again; the audio a spoken chat turn transcribed and the characters it spoke);
# hop-by-hop and framing headers are ours.
# TEI's and TGI's token counts: what the gateway meters their bare replies by
RELAYED_HEADERS = (
    "content-type",
    "retry-after",
    "x-genmesh-audio-seconds",
    "x-genmesh-speech-characters",
    "x-compute-tokens",
    "x-prompt-tokens",
    "x-generated-tokens",
)
# Idle connections are dropped before uvicorn's (and vLLM's) 5 s keep-alive would close them under
# us: aiohttp never resends a POST that met a connection the engine had just closed.
KEEPALIVE_S = 4.0
# Request bodies as compact UTF-8 JSON (aiohttp's default adds spaces and escapes non-ASCII).
_compact_json = functools.partial(json.dumps, ensure_ascii=False, separators=(",", ":"))
# No connection to the engine could be had: nothing was sent.
_UNAVAILABLE = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


@dataclass(frozen=True, slots=True)
class Reply:
    """An engine reply read in full."""

    status: int
    headers: Mapping[str, str]  # aiohttp's: names match whatever their case
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not."""
        return json.loads(self.body)


class Upstream:
    """An ``aiohttp.ClientSession`` bound to the engine's base URL; every failure leaves as an ``OpenAIError``.

    Build it inside the running event loop (the app's lifespan) and ``aclose`` it at shutdown.
    """

    def __init__(self, settings: MicroserviceSettings) -> None:
        headers = {"user-agent": "genmesh-microservice"}
        if settings.openai_api_key is not None:
            headers["authorization"] = f"Bearer {settings.openai_api_key.get_secret_value()}"
        self.endpoint = settings.llm_endpoint
        self.read_timeout_s = settings.read_timeout_s
        self._urls: dict[str, URL] = {}
        self.timeout = aiohttp.ClientTimeout(
            total=None,
            connect=settings.read_timeout_s,  # waiting for a pooled connection, then connecting
            sock_connect=settings.connect_timeout_s,
            sock_read=settings.read_timeout_s,  # the longest silence between two reads
        )
        self.session = aiohttp.ClientSession(
            connector=bounded_connector(settings.max_connections, KEEPALIVE_S, settings.send_buffer_bytes),
            read_bufsize=READ_BUFSIZE,
            headers=headers,
            timeout=self.timeout,
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding",),
            cookie_jar=aiohttp.DummyCookieJar(),
            json_serialize=_compact_json,
        )

    def _url(self, path: str) -> URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = URL(self.endpoint + path)
        return url

    async def open(
        self,
        method: str,
        path: str,
        request_id: str,
        json_body: dict[str, Any] | None = None,
        timeouts: aiohttp.ClientTimeout | None = None,
        raw: tuple[bytes | AsyncIterable[bytes], str] | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> aiohttp.ClientResponse:
        """Send a request and return as soon as the status and headers are in; the body is left to stream.

        The caller owns the response and must ``close`` it. ``raw``: a body sent as it came (bytes, or
        pieces sent as they come, each taken once the one before is sent; content type); ``extra_headers``:
        the client's headers this request passes on.
        """
        headers = {"x-request-id": request_id} if raw is None else {"x-request-id": request_id, "content-type": raw[1]}
        if extra_headers:
            headers.update(extra_headers)
        with self._failures():
            return await self.session.request(
                method,
                self._url(path),
                json=json_body,
                data=raw[0] if raw is not None else None,
                headers=inject(headers),
                timeout=timeouts if timeouts is not None else self.timeout,
                allow_redirects=False,
            )

    async def read(self, response: aiohttp.ClientResponse) -> Reply:
        """Read the rest of ``response`` and close it."""
        try:
            with self._failures():
                body = await response.read()
        finally:
            await close(response)
        return Reply(response.status, response.headers, body)

    async def fetch(self, opening: Awaitable[aiohttp.ClientResponse]) -> Reply:
        """Await ``opening`` (an ``open`` call) and read the whole body."""
        return await self.read(await opening)

    @contextlib.contextmanager
    def _failures(self) -> Iterator[None]:
        """Transport failures raised as the OpenAI errors a client sees (``failure``)."""
        try:
            yield
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self.failure(exc) from exc

    def failure(self, exc: BaseException) -> OpenAIError:
        """The OpenAI error a client sees for a transport failure talking to the engine."""
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, _UNAVAILABLE):
            log.warning("engine unreachable at %s: %s", self.endpoint, detail)
            return service_unavailable(
                f"The LLM engine at {self.endpoint} is unreachable ({detail})", code="engine_unavailable"
            )
        if isinstance(exc, TimeoutError):  # aiohttp's SocketTimeoutError (sock_read) among them
            log.warning("engine timed out: %s", detail)
            message = f"The LLM engine at {self.endpoint} sent nothing for {self.read_timeout_s:g} s"
            status, kind, code = 504, "timeout_error", "engine_timeout"
        else:
            log.warning("engine connection failed: %s", detail)
            message = f"The connection to the LLM engine at {self.endpoint} failed ({detail})"
            status, kind, code = 502, "upstream_error", "engine_connection_failed"
        return OpenAIError(message, status=status, type=kind, code=code)

    async def aclose(self) -> None:
        await self.session.close()


async def close(response: aiohttp.ClientResponse) -> None:
    """Done with an upstream response, even while our task is being cancelled (a client went away).

    A reply read to its end hands its connection back to the pool; one that is not (our client
    left, the stream broke) has its connection closed, which is how the engine learns that the
    generation is no longer wanted. ``release`` is synchronous, so no cancellation can come
    between the call and the close (nothing to shield, unlike an awaited close).
    """
    response.release()


def relayed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The engine reply's headers this hop passes on."""
    return {k: v for k in RELAYED_HEADERS if (v := headers.get(k)) is not None}
