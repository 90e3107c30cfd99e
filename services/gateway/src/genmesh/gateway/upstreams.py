"""The upstream pool of each model: health probes and a circuit breaker per upstream.

Health is this gateway's own view (probes, request failures, and progress); it decides which
upstreams this gateway offers to the admission scripts. The least-in-flight pick itself happens in
Redis (``lua_scripts.py``), across all replicas.

Progress: an upstream can pass its health probe while generating nothing (a hung engine whose
``/health`` has not noticed yet). So the gateway watches the streams it relays: when an upstream
has streams in flight but none of them has carried a byte for ``progress_timeout_s``, its circuit
opens as after failures. (Unary replies arrive whole at the end, so they are not watched.)

An open circuit is out for ``circuit_cooldown_s``; then it is half-open: probed every
``circuit_probe_interval_s`` (not every ``health_interval_s``) until a probe succeeds, and a failed
probe does not start the cool-down again. So an upstream that recovers (an engine whose new core
is up) is offered again within a fraction of a second of its health check saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

import httpx

from .config import ModelRoute, RoutingConfig, UpstreamConfig
from .settings import GatewaySettings

log = logging.getLogger("genmesh.gateway.upstreams")


@dataclass
class Upstream:
    config: UpstreamConfig
    threshold: int
    cooldown_s: float
    failures: int = 0
    open_until: float = 0.0
    probed_ok: bool = True
    opened: int = field(default=0)
    streams: int = 0  # streams this gateway is relaying from it now
    last_output: float = 0.0  # when one of them last carried output (or the first one began)

    @property
    def url(self) -> str:
        return self.config.url

    @property
    def name(self) -> str:
        return self.config.name

    def available(self) -> bool:
        """Closed circuit: offered to admission. Open: out until the cool-down ends and a probe succeeds."""
        return self.probed_ok and time.monotonic() >= self.open_until

    def record_success(self) -> None:
        self.failures = 0

    def half_open(self) -> bool:
        """Open, with its cool-down over: probed often until a probe succeeds."""
        return not self.probed_ok and time.monotonic() >= self.open_until

    def record_failure(self, reason: str) -> None:
        self.failures += 1
        if self.failures >= self.threshold and self.available():  # an open circuit stays as it is
            self._open(f"after {self.failures} failures ({reason})")

    def _open(self, why: str) -> None:
        self.open_until = time.monotonic() + self.cooldown_s
        self.probed_ok = False
        self.opened += 1
        log.warning("upstream %s circuit open %s", self.url, why)

    def stream_began(self) -> None:
        if self.streams == 0:
            self.last_output = time.monotonic()
        self.streams += 1

    def stream_output(self) -> None:
        self.last_output = time.monotonic()

    def stream_ended(self) -> None:
        self.streams -= 1

    def check_progress(self, timeout_s: float) -> None:
        """Open the circuit if streams are in flight but none has carried output for ``timeout_s``."""
        now = time.monotonic()
        silent = now - self.last_output
        if timeout_s > 0 and self.streams and silent >= timeout_s and self.available():
            self._open(f"after {silent:.0f} s without output on any of its {self.streams} stream(s)")


class Pool:
    """All models' upstreams, in config order (the slot-key order in Redis)."""

    def __init__(self, config: RoutingConfig, settings: GatewaySettings) -> None:
        self.settings = settings
        self.models: dict[str, list[Upstream]] = {
            name: [Upstream(u, settings.circuit_failures, settings.circuit_cooldown_s) for u in route.upstreams]
            for name, route in config.models.items()
        }

    def upstreams(self, route: ModelRoute) -> list[Upstream]:
        return self.models[route.name]

    def caps(self, route: ModelRoute, exclude: frozenset[int] = frozenset()) -> list[int]:
        return [
            u.config.max_concurrency if i not in exclude and u.available() else 0
            for i, u in enumerate(self.upstreams(route))
        ]

    def any_available(self, route: ModelRoute, exclude: frozenset[int] = frozenset()) -> bool:
        return any(self.caps(route, exclude))

    def unserved(self) -> list[str]:
        """The models none of whose upstreams is available now."""
        return [name for name, pool in self.models.items() if not any(u.available() for u in pool)]

    async def probe_forever(self, client: httpx.AsyncClient) -> None:
        """Every upstream each ``health_interval_s``; half-open ones each ``circuit_probe_interval_s``."""
        s = self.settings
        due = 0.0
        while True:
            ups = [u for pool in self.models.values() for u in pool]
            everyone = time.monotonic() >= due
            if everyone:
                due = time.monotonic() + s.health_interval_s
                for up in ups:
                    up.check_progress(s.progress_timeout_s)
            await asyncio.gather(*(self._probe(client, u) for u in ups if everyone or u.half_open()))
            await asyncio.sleep(min(s.health_interval_s, s.circuit_probe_interval_s))

    async def probe_all(self, client: httpx.AsyncClient) -> None:
        ups = [u for pool in self.models.values() for u in pool]
        await asyncio.gather(*(self._probe(client, u) for u in ups))

    async def _probe(self, client: httpx.AsyncClient, up: Upstream) -> None:
        if time.monotonic() < up.open_until:
            return  # cooling down: no probe until the circuit may half-open
        ok = False
        with contextlib.suppress(httpx.HTTPError, OSError):
            r = await client.get(up.url + up.config.health_path, timeout=self.settings.health_timeout_s)
            ok = r.status_code == 200
        if ok:
            if not up.probed_ok:
                log.info("upstream %s healthy again", up.url)
            up.probed_ok = True
            up.failures = 0
        else:
            up.record_failure("health probe failed")
