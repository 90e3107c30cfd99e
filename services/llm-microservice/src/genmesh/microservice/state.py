"""Everything one microservice holds, built at start-up and torn down at shutdown."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

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
    async def start(
        cls,
        settings: MicroserviceSettings,
        version: str,
        metrics: MicroserviceMetrics,
    ) -> MicroserviceState:
        """Build it all; call inside the running event loop (the app's lifespan)."""
        upstream = Upstream(settings)
        # A probe waits at most a second more than a connect for the engine's answer.
        probe_s = settings.connect_timeout_s + 1.0
        probe_timeout = aiohttp.ClientTimeout(
            total=None, connect=probe_s, sock_connect=settings.connect_timeout_s, sock_read=probe_s
        )
        readiness = ReadinessProbe(upstream, metrics, settings.ready_cache_ttl_s, probe_timeout)
        return cls(settings, version, upstream, metrics, readiness)

    async def close(self) -> None:
        await self.upstream.aclose()
