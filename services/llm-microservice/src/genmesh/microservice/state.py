"""Everything one microservice holds, built at start-up and torn down at shutdown."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from .metrics import MicroserviceMetrics
from .readiness import ReadinessProbe
from .settings import MicroserviceSettings
from .upstream import Upstream


@dataclass
class MicroserviceState:
    settings: MicroserviceSettings
    version: str
    upstream: Upstream
    metrics: MicroserviceMetrics
    readiness: ReadinessProbe

    @classmethod
    def start(
        cls,
        settings: MicroserviceSettings,
        version: str,
        metrics: MicroserviceMetrics,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> MicroserviceState:
        upstream = Upstream(settings, transport)
        probe_timeout = httpx.Timeout(settings.connect_timeout_s + 1.0, connect=settings.connect_timeout_s)
        readiness = ReadinessProbe(upstream, metrics, settings.ready_cache_ttl_s, probe_timeout)
        return cls(settings, version, upstream, metrics, readiness)

    async def close(self) -> None:
        await self.upstream.aclose()
