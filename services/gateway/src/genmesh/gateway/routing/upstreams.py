"""The upstream pool of each model: health probes and a circuit breaker per upstream.

Health is this gateway's own view (probes, request failures, and progress); it decides which
upstreams this gateway offers to the admission scripts. The least-in-flight pick itself happens in
Redis (``redis/scripts.py``), across all replicas.

Progress: an upstream can pass its health probe while generating nothing (a hung engine whose
``/health`` has not noticed yet). So the gateway watches the streams it relays: when an upstream
has streams in flight but none of them has carried a byte for ``progress_timeout_s``, its circuit
opens as after failures. (Unary replies arrive whole at the end, so they are not watched.)

An open circuit is out for ``circuit_cooldown_s``; then it is half-open: probed every
``circuit_probe_interval_s`` (not every ``health_interval_s``) until a probe succeeds, and a failed
probe does not start the cool-down again. So an upstream that recovers (an engine whose new core
is up) is offered again within a fraction of a second of its health check saying so. A request that
finds no upstream available probes a half-open one at once (at most once per probe interval; also
one cooling down after failures, not after a stall, which its health check cannot see): see
``Pool.probe_now``.

Stale evidence (issue 45): no upstream is held out once a health probe taken after its last failure
has passed. A probe that passes after failures marks the upstream *recovered* (``recovered_at``,
the time it was sent); a failure or a stall of a request sent before that is evidence about the
upstream as it was before it recovered (a stream of a killed engine core, ending after the new core
is up), so it neither counts towards nor opens the circuit. (A probe that passes with no failure
before it moves nothing: a hung engine whose ``/health`` still passes is what the progress watch is
for.) Every transition is logged with its cause, counted in
``genmesh_gateway_circuit_transitions_total{upstream,to,cause}``, and shown in the console.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import httpx

from ..settings import GatewaySettings
from .config import ModelRoute, RoutingConfig, UpstreamConfig

log = logging.getLogger("genmesh.gateway.upstreams")

Circuit = Literal["closed", "open", "half-open"]
Cause = Literal["probe", "request_failure", "stall", "cooldown"]
# called on every transition: the upstream, the state it went to, and why
OnTransition = Callable[["Upstream", Circuit, Cause], None]


@dataclass
class Upstream:
    config: UpstreamConfig
    threshold: int
    cooldown_s: float
    on_transition: OnTransition | None = None
    failures: int = 0
    open_until: float = 0.0
    probed_ok: bool = True
    opened: int = field(default=0)
    state: Circuit = "closed"  # as last logged; ``circuit()`` is the state now
    cause: str = ""  # the cause of the last transition ("" before the first)
    last_failure_at: float = -math.inf  # when a failure last counted
    recovered_at: float = -math.inf  # when the last probe that passed after failures was sent
    probed_at: float = -math.inf  # when the last probe was sent
    demand_probed_at: float = -math.inf  # when the last probe for a request that found no upstream was sent
    stalled: bool = False  # the circuit was opened by the progress watch
    streams: dict[str, float] = field(default_factory=dict)  # streams relayed from it now: key -> sent at
    last_output: float = 0.0  # when one of them last carried output (or the first one began)
    clock: Callable[[], float] = time.monotonic

    @property
    def url(self) -> str:
        return self.config.url

    @property
    def name(self) -> str:
        return self.config.name

    def available(self) -> bool:
        """Closed circuit: offered to admission. Open: out until the cool-down ends and a probe succeeds."""
        return self.probed_ok and self.clock() >= self.open_until

    def half_open(self) -> bool:
        """Open, with its cool-down over: probed often until a probe succeeds."""
        return not self.probed_ok and self.clock() >= self.open_until

    def circuit(self) -> Circuit:
        if self.probed_ok and self.clock() >= self.open_until:
            return "closed"
        return "half-open" if self.half_open() else "open"

    def stale(self, began: float) -> bool:
        """Evidence from a request sent at ``began`` predates the upstream's last recovery."""
        return began < self.recovered_at

    # -- evidence ----------------------------------------------------------------------------------

    def record_success(self) -> None:
        self.failures = 0

    def record_failure(self, reason: str, began: float, rid: str = "", cause: Cause = "request_failure") -> None:
        """A failure of a request (or probe) sent at ``began``; ``rid``: its request id."""
        who = f" (request {rid})" if rid else ""
        if self.stale(began):
            log.info(
                "upstream %s: %s%s ignored: sent %.1f s before the probe that found it healthy again",
                self.url, reason, who, self.recovered_at - began,
            )  # fmt: skip
            return
        self.failures += 1
        self.last_failure_at = self.clock()
        if self.failures >= self.threshold and self.available():  # an open circuit stays as it is
            self._open(cause, f"after {self.failures} failures ({reason}){who}")

    def check_progress(self, timeout_s: float) -> None:
        """Open the circuit if streams sent since the last recovery are in flight but none has
        carried output for ``timeout_s`` (measured from the recovery at the earliest)."""
        now = self.clock()
        fresh = sum(1 for began in self.streams.values() if not self.stale(began))
        silent = now - max(self.last_output, self.recovered_at)
        if timeout_s > 0 and fresh and silent >= timeout_s and self.available():
            self.last_failure_at = now
            self._open("stall", f"after {silent:.0f} s without output on any of its {fresh} stream(s)")

    def probe_passed(self, sent: float) -> None:
        """A health probe sent at ``sent`` answered 200: closes the circuit if it was sent after the
        last failure (one sent before it says nothing about it)."""
        if sent < self.last_failure_at:
            return
        if self.failures or not self.probed_ok:
            self.recovered_at = sent
        self.failures = 0
        if not self.probed_ok or self.open_until:
            self.probed_ok = True
            self.open_until = 0.0
            self.stalled = False
            self._moved("closed", "probe", "healthy again")

    def probe_failed(self, sent: float) -> None:
        self.record_failure("health probe failed", sent, cause="probe")

    def _open(self, cause: Cause, why: str) -> None:
        self.open_until = self.clock() + self.cooldown_s
        self.probed_ok = False
        self.stalled = cause == "stall"
        self.opened += 1
        self._moved("open", cause, why, logging.WARNING)

    def advance(self) -> None:
        """Log the end of a cool-down (open -> half-open) once it is over."""
        if self.state == "open" and self.half_open():
            self._moved("half-open", "cooldown", f"cool-down of {self.cooldown_s:g} s over: probing it")

    def _moved(self, to: Circuit, cause: Cause, why: str, level: int = logging.INFO) -> None:
        self.state, self.cause = to, cause
        log.log(level, "upstream %s circuit %s (cause: %s) %s", self.url, to, cause, why)
        if self.on_transition is not None:
            self.on_transition(self, to, cause)

    # -- streams (the progress watch) --------------------------------------------------------------

    def stream_began(self, key: str) -> float:
        """A stream sent to it now (``key``: unique among its streams); returns when."""
        now = self.clock()
        if not self.streams:
            self.last_output = now
        self.streams[key] = now
        return now

    def stream_output(self) -> None:
        self.last_output = self.clock()

    def stream_ended(self, key: str) -> None:
        self.streams.pop(key, None)

    def stream_sent_at(self, key: str) -> float:
        """When stream ``key`` was sent (now, if it is not one of its streams)."""
        return self.streams.get(key, self.clock())


class Pool:
    """All models' upstreams, in config order (the slot-key order in Redis)."""

    def __init__(self, config: RoutingConfig, settings: GatewaySettings, on_transition: OnTransition | None = None):
        self.settings = settings
        self.models: dict[str, list[Upstream]] = {
            name: [
                Upstream(u, settings.circuit_failures, settings.circuit_cooldown_s, on_transition)
                for u in route.upstreams
            ]
            for name, route in config.models.items()
        }
        self.client: httpx.AsyncClient | None = None  # the probes' (set by probe_forever)
        self._probing: dict[int, asyncio.Task[None]] = {}  # id(upstream) -> its probe in flight

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

    # -- probing on demand -------------------------------------------------------------------------

    def _on_demand(self, up: Upstream, now: float) -> float:
        """When ``up`` may next be probed for a request that finds no upstream: half-open, or cooling
        down after failures (not a stall: its health check cannot see one), once per probe interval
        (counted apart from the probe loop's); inf: not at all (closed)."""
        if up.probed_ok and now >= up.open_until:
            return math.inf
        if up.stalled and now < up.open_until:
            return up.open_until
        return up.demand_probed_at + self.settings.circuit_probe_interval_s

    async def probe_now(self, route: ModelRoute, exclude: frozenset[int] = frozenset()) -> None:
        """Probe the route's unavailable upstreams that may be probed on demand now, so that one that
        has recovered is offered at once rather than at the probe loop's next round."""
        if self.client is not None:
            ups = [u for i, u in enumerate(self.upstreams(route)) if i not in exclude and not u.available()]
            await asyncio.gather(*(self._probe_for_request(self.client, u) for u in ups))

    async def _probe_for_request(self, client: httpx.AsyncClient, up: Upstream) -> None:
        if (task := self._probing.get(id(up))) is not None:
            await asyncio.shield(task)  # a probe in flight: its answer first
        now = time.monotonic()
        if up.available() or self._on_demand(up, now) > now:
            return
        up.demand_probed_at = now
        await self._probe_once(client, up, on_demand=True)

    def next_probe_in(self, route: ModelRoute, exclude: frozenset[int] = frozenset()) -> int:
        """Whole seconds (at least 1) until one of the route's unavailable upstreams may be probed
        next (by the probe loop, or on demand): the Retry-After of a ``no_healthy_upstream`` 503."""
        now = time.monotonic()
        interval = self.settings.circuit_probe_interval_s
        ups = [u for i, u in enumerate(self.upstreams(route)) if i not in exclude and not u.available()]
        due = (min(self._on_demand(u, now), max(u.open_until, u.probed_at + interval)) for u in ups)
        return max(1, math.ceil(min(due, default=now) - now))

    # -- the probe loop ----------------------------------------------------------------------------

    async def probe_forever(self, client: httpx.AsyncClient) -> None:
        """Every upstream each ``health_interval_s``; half-open ones each ``circuit_probe_interval_s``."""
        s = self.settings
        self.client = client
        due = 0.0
        while True:
            ups = [u for pool in self.models.values() for u in pool]
            everyone = time.monotonic() >= due
            if everyone:
                due = time.monotonic() + s.health_interval_s
                for up in ups:
                    up.check_progress(s.progress_timeout_s)
            for up in ups:
                up.advance()
            await asyncio.gather(*(self._probe_once(client, u) for u in ups if everyone or u.half_open()))
            await asyncio.sleep(min(s.health_interval_s, s.circuit_probe_interval_s))

    async def probe_all(self, client: httpx.AsyncClient) -> None:
        self.client = client
        ups = [u for pool in self.models.values() for u in pool]
        await asyncio.gather(*(self._probe_once(client, u) for u in ups))

    async def _probe_once(self, client: httpx.AsyncClient, up: Upstream, on_demand: bool = False) -> None:
        """One probe of ``up`` at a time: a second caller waits for the one in flight."""
        task = self._probing.get(id(up))
        if task is None:
            task = asyncio.ensure_future(self._probe(client, up, on_demand))
            self._probing[id(up)] = task
            task.add_done_callback(lambda _t: self._probing.pop(id(up), None))
        await asyncio.shield(task)

    async def _probe(self, client: httpx.AsyncClient, up: Upstream, on_demand: bool) -> None:
        if not on_demand and time.monotonic() < up.open_until:
            return  # cooling down: no periodic probe until the circuit may half-open
        sent = up.probed_at = time.monotonic()
        ok = False
        with contextlib.suppress(httpx.HTTPError, OSError):
            r = await client.get(up.url + up.config.health_path, timeout=self.settings.health_timeout_s)
            ok = r.status_code == 200
        if on_demand:
            log.info("upstream %s probed for a request that found no upstream: %s", up.url, "ok" if ok else "failed")
        if ok:
            up.probe_passed(sent)
        else:
            up.probe_failed(sent)
