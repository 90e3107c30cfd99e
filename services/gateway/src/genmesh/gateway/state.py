"""Everything one gateway process holds, created in the app's lifespan and passed explicitly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

import httpx
from redis.asyncio import Redis
from redis.asyncio.retry import Retry  # the asyncio one: redis.retry.Retry would not await, so never retry
from redis.backoff import ExponentialBackoff

from genmesh.relay import RelayClient

from .admission.auth import KeyStore
from .admission.queue import Admission
from .admission.quotas import Quotas
from .admission.ratelimit import Limiter
from .console.activity import Activity
from .console.status import StatusBoard
from .console.throttle import SharedLoginThrottle
from .metrics import GatewayMetrics
from .redis.client import RedisClient
from .redis.keys import KeySpace
from .redis.scripts import Scripts
from .routing.config import RoutingConfig
from .routing.upstreams import Pool
from .settings import GatewaySettings
from .storage.batches import BatchStore
from .storage.files import FileStore
from .storage.purge import Holdings
from .storage.responses import ResponseStore

log = logging.getLogger("genmesh.gateway")


def connect_redis(settings: GatewaySettings) -> Redis:
    """A client that fails fast when Redis is down and reconnects by itself when it returns."""
    return Redis.from_url(
        settings.redis_url,
        socket_timeout=settings.redis_timeout_s,
        socket_connect_timeout=settings.redis_timeout_s,
        retry=Retry(ExponentialBackoff(cap=0.05, base=0.01), 1),
        health_check_interval=30,
    )


class GatewayState:
    def __init__(self, settings: GatewaySettings, config: RoutingConfig) -> None:
        self.settings = settings
        self.config = config
        self.auth_required = settings.auth_required()
        self.admin_key = settings.admin_secret()
        self.redis = connect_redis(settings)
        self.keyspace = KeySpace(settings.redis_prefix)
        self.scripts = Scripts.register(self.redis)
        self.metrics = GatewayMetrics()
        transitions = self.metrics.circuit_transitions
        self.pool = Pool(config, settings, lambda up, to, cause: transitions.labels(up.name, to, cause).inc())
        self.keys = KeyStore(self.redis, self.keyspace, cache_ttl_s=settings.auth_cache_s)
        store = RedisClient(self.redis, self.scripts, self.keyspace, self.metrics)
        self.admission = Admission(store, config, settings, self.pool, self.keys.forget)
        self.limiter = Limiter(store, settings.lease_ttl_s)
        self.quotas = Quotas(store, settings)
        self.files = FileStore(store, settings, self.quotas)
        self.batches = BatchStore(store, self.files, settings, config)
        self.responses = ResponseStore(
            self.redis,
            self.keyspace,
            self.metrics,
            settings.responses_ttl_s,
            settings.responses_max_bytes,
            self.quotas,
        )
        self.storage = Holdings(self.files, self.batches, self.responses)
        # the relay path (aiohttp), its upstream sockets bounded like the client ones
        self.upstream = RelayClient(settings.connect_timeout_s, receive_buffer_bytes=settings.send_buffer_bytes)
        self.http = httpx.AsyncClient(  # health probes
            timeout=httpx.Timeout(None, connect=settings.connect_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )
        self.activity = Activity()
        self.console = StatusBoard(self)
        self.login_throttle = SharedLoginThrottle(
            self.scripts.login_attempt,
            self.keyspace,
            settings.console_login_attempts,
            settings.console_login_user_attempts,
            settings.console_login_window_s,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()

    @classmethod
    async def start(cls, settings: GatewaySettings, config: RoutingConfig) -> GatewayState:
        st = cls(settings, config)
        await st.pool.probe_all(st.http)
        for work in (
            st.admission.listen_forever(),
            st.admission.renew_forever(),
            st.admission.reclaim_forever(),
            st.limiter.renew_forever(),
            st.pool.probe_forever(st.http),
            st.console.run_forever(),
        ):
            st._tasks.append(asyncio.create_task(work))
        if not st.auth_required:
            log.warning("API keys are NOT required (bound to %s); use --auth on to require them", settings.host)
        return st

    def add_task(self, work: Coroutine[Any, Any, None]) -> None:
        """Run background work until the gateway stops (cancelled in ``close``)."""
        self._tasks.append(asyncio.create_task(work))

    def spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run clean-up work that must finish even when the request's task is cancelled."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def ready(self) -> tuple[bool, dict[str, Any]]:
        redis_ok = False
        with contextlib.suppress(Exception):
            redis_ok = bool(await self.redis.ping())
        upstreams = {name: {u.name: u.available() for u in pool} for name, pool in self.pool.models.items()}
        unserved = self.pool.unserved()  # a model with no healthy upstream: its requests get 503
        listening = self.admission.grants.listening
        ok = redis_ok and not unserved and listening
        detail = {"redis": redis_ok, "grant_listener": listening, "upstreams": upstreams}
        return ok, {**detail, "no_healthy_upstream": unserved}

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:  # bounded: a task that does not end in time must not hold the shutdown
            done, stuck = await asyncio.wait(self._tasks, timeout=5)
            for task in done:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    task.result()
            if stuck:
                log.warning("%d background task(s) still running at shutdown: %s", len(stuck), stuck)
        if self._background:
            await asyncio.wait(list(self._background), timeout=5)
        await self.upstream.aclose()
        await self.console.aclose()
        await self.http.aclose()
        await self.redis.aclose()
