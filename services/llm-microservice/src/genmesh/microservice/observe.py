"""ASGI middleware that measures every API request and writes one structured access-log line for it."""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from genmesh.protocol import RERANK_PATHS, SCORE_PATHS

from .metrics import MicroserviceMetrics

log = logging.getLogger("genmesh.microservice.access")

# Only these paths get metric labels; anything else would let clients grow label cardinality.
_V1 = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/v1/models")
_AUDIO = ("/v1/audio/transcriptions", "/v1/audio/speech")
API_PATHS = frozenset(
    [
        *_V1,
        *(p.replace("/v1", prefix, 1) for p in _V1 for prefix in ("/v3", "/v3/v1")),
        *RERANK_PATHS,
        *SCORE_PATHS,
        *_AUDIO,
    ]
)


class ObserveMiddleware:
    """Counts by status, latency (to the last byte, streams included) and in-flight requests."""

    def __init__(self, app: ASGIApp, metrics: MicroserviceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in API_PATHS:
            await self.app(scope, receive, send)
            return
        endpoint: str = scope["path"]
        started = time.perf_counter()
        status = 500

        async def send_observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_observed)
        finally:
            elapsed = time.perf_counter() - started
            self.metrics.in_flight.dec()
            self.metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
            self.metrics.latency.labels(endpoint=endpoint).observe(elapsed)
            log.info(
                "%s %s %d %.1f ms",
                scope["method"],
                endpoint,
                status,
                elapsed * 1000,
                extra={"method": scope["method"], "path": endpoint, "status": status, "duration_ms": elapsed * 1000},
            )
