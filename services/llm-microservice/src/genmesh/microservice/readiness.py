"""Readiness: does the engine answer ``GET /health`` with 200? Asked at most once per TTL.

A flood of probes (load balancers, orchestrators, several replicas' checks) shares one
engine call: answers are cached for ``ready_cache_ttl_s`` and concurrent probes wait on the
one call in progress instead of starting their own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from genmesh.protocol import OpenAIError

from .metrics import MicroserviceMetrics
from .upstream import Upstream


@dataclass(frozen=True)
class Readiness:
    ready: bool
    detail: dict[str, Any]
    checked_at: float  # monotonic seconds

    def body(self, now: float) -> dict[str, Any]:
        return {
            "status": "ready" if self.ready else "unavailable",
            "engine": self.detail,
            "age_s": round(max(0.0, now - self.checked_at), 3),
        }


@dataclass
class ReadinessProbe:
    upstream: Upstream
    metrics: MicroserviceMetrics
    ttl_s: float
    probe_timeout: aiohttp.ClientTimeout
    clock: Callable[[], float] = time.monotonic
    _last: Readiness | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def check(self) -> Readiness:
        """A "ready" answer is reused for ``ttl_s``; a "not ready" one only by the probes that were
        waiting for it, so a recovered engine is seen ready by the next probe, not ``ttl_s`` later."""
        asked = self.clock()
        last = self._last
        if last is not None and last.ready and asked - last.checked_at < self.ttl_s:
            return last
        async with self._lock:
            last = self._last  # another probe may have refreshed it while we waited
            if last is not None and (
                last.checked_at >= asked or (last.ready and self.clock() - last.checked_at < self.ttl_s)
            ):
                return last
            self._last = await self._ask_engine()
            return self._last

    async def _ask_engine(self) -> Readiness:
        try:
            reply = await self.upstream.fetch(
                self.upstream.open("GET", "/health", "readiness", timeouts=self.probe_timeout)
            )
        except OpenAIError as err:
            self.metrics.readiness_checks.labels(result="unreachable").inc()
            return Readiness(False, {"reason": err.message}, self.clock())
        ok = reply.status == 200
        self.metrics.readiness_checks.labels(result="ready" if ok else "unavailable").inc()
        try:
            detail = reply.json()
        except ValueError:
            detail = {"body": reply.text[:200]}
        if not isinstance(detail, dict):
            detail = {"body": detail}
        detail["http_status"] = reply.status
        return Readiness(ok, detail, self.clock())
