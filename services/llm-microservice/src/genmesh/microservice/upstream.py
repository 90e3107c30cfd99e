"""The one HTTP client to the engine: timeouts, credentials, request ids, and transport errors as OpenAI errors."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import httpx

from genmesh.protocol import OpenAIError, service_unavailable

from .settings import MicroserviceSettings

log = logging.getLogger("genmesh.microservice.upstream")

# Upstream response headers worth handing to our client; hop-by-hop and framing headers are ours.
RELAYED_HEADERS = ("content-type",)


class Upstream:
    """An ``httpx.AsyncClient`` bound to the engine's base URL; every failure leaves as an ``OpenAIError``."""

    def __init__(self, settings: MicroserviceSettings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        headers = {"user-agent": "genmesh-microservice"}
        if settings.openai_api_key is not None:
            headers["authorization"] = f"Bearer {settings.openai_api_key.get_secret_value()}"
        self.endpoint = settings.llm_endpoint
        self.read_timeout_s = settings.read_timeout_s
        self.client = httpx.AsyncClient(
            base_url=settings.llm_endpoint,
            headers=headers,
            timeout=httpx.Timeout(
                connect=settings.connect_timeout_s,
                read=settings.read_timeout_s,
                write=settings.read_timeout_s,
                pool=settings.read_timeout_s,
            ),
            limits=httpx.Limits(
                max_connections=settings.max_connections,
                max_keepalive_connections=settings.max_connections,
            ),
            transport=transport,
        )

    async def open(
        self,
        method: str,
        path: str,
        request_id: str,
        json_body: dict[str, Any] | None = None,
        timeouts: httpx.Timeout | None = None,
    ) -> httpx.Response:
        """Send a request and return as soon as the status and headers are in; the body is left to stream.

        The caller owns the response and must ``close`` it.
        """
        request = self.client.build_request(
            method,
            path,
            json=json_body,
            headers={"x-request-id": request_id},
            timeout=timeouts if timeouts is not None else httpx.USE_CLIENT_DEFAULT,
        )
        try:
            return await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise self.failure(exc) from exc

    async def fetch(
        self,
        method: str,
        path: str,
        request_id: str,
        json_body: dict[str, Any] | None = None,
        timeouts: httpx.Timeout | None = None,
    ) -> httpx.Response:
        """Send a request and read the whole body."""
        response = await self.open(method, path, request_id, json_body, timeouts)
        try:
            await response.aread()
        except httpx.HTTPError as exc:
            raise self.failure(exc) from exc
        finally:
            await close(response)
        return response

    def failure(self, exc: Exception) -> OpenAIError:
        """The OpenAI error a client sees for a transport failure talking to the engine."""
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
            log.warning("engine unreachable at %s: %s", self.endpoint, detail)
            return service_unavailable(
                f"The LLM engine at {self.endpoint} is unreachable ({detail})", code="engine_unavailable"
            )
        if isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout):
            log.warning("engine timed out: %s", detail)
            return OpenAIError(
                f"The LLM engine at {self.endpoint} sent nothing for {self.read_timeout_s:g} s",
                status=504,
                type="timeout_error",
                code="engine_timeout",
            )
        log.warning("engine connection failed: %s", detail)
        return OpenAIError(
            f"The connection to the LLM engine at {self.endpoint} failed ({detail})",
            status=502,
            type="upstream_error",
            code="engine_connection_failed",
        )

    async def aclose(self) -> None:
        await self.client.aclose()


async def close(response: httpx.Response) -> None:
    """Close an upstream response even while our task is being cancelled (a client went away).

    Closing a response whose body is not fully read drops the connection, which is how the
    engine learns that the generation is no longer wanted.
    """
    with anyio.CancelScope(shield=True):
        await response.aclose()


def relayed_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k in RELAYED_HEADERS if (v := response.headers.get(k)) is not None}
