"""Admission: take a slot lease on an upstream, or wait in Redis for one, woken by pub/sub.

A request either gets a lease at once (``ADMIT``) or a place in the model's queue. Whoever frees
a slot (``RELEASE``, ``RECLAIM``) grants it to the head of the queue inside the same script and
publishes ``<id>|<upstream>`` on the model's channel; this process's listener (``grants.py``)
resolves the waiting request's future at once. A slow safety re-check (``recheck_interval_s``) reads the
request's state from Redis in case a message was lost (listener reconnecting, Redis restarted).
Leases and queue heartbeats of this process's requests are renewed every lease/3; a killed
gateway's leases expire and any replica's sweep hands them on. When Redis loses the state (a
restart without persistence) the scripts start a new epoch, and this gateway re-registers the
leases of its running requests before it admits another (``redis/scripts.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError

from ..redis.client import RedisClient, RedisUnavailable, text
from ..redis.keys import ModelKeys
from ..routing.config import ModelRoute, RoutingConfig
from ..routing.upstreams import Pool
from ..settings import GatewaySettings
from .grants import RECHECK, GrantListener
from .tickets import BATCH_CLASS, BATCH_PRIORITY, NoUpstream, QueueFull, QueueTimeout, Ticket

log = logging.getLogger("genmesh.gateway.queue")


class Admission:
    def __init__(
        self,
        store: RedisClient,
        config: RoutingConfig,
        settings: GatewaySettings,
        pool: Pool,
        on_revoked: Callable[[str | None], None] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.pool = pool
        self.config = config
        self.keys: dict[str, ModelKeys] = {
            name: store.keyspace.model(name, [u.name for u in route.upstreams]) for name, route in config.models.items()
        }
        revocations = store.keyspace.api_key_revocations()
        channels = [k.channel for k in self.keys.values()]
        self.grants = GrantListener(store.redis, store.metrics, channels, revocations, on_revoked)
        self._tracked: dict[str, dict[str, Ticket]] = {name: {} for name in config.models}
        self.gateway_id = uuid.uuid4().hex
        self._epoch = dict.fromkeys(config.models, "")  # the state's epoch this gateway last renewed in
        self._others = dict.fromkeys(config.models, 0)  # other gateways with requests, as last seen
        self._resync_locks = {name: asyncio.Lock() for name in config.models}
        self._holds: dict[str, asyncio.Task[None]] = {}
        self._releasing: dict[str, tuple[list[str], asyncio.Future[None]]] = {}
        self._flushing: dict[str, asyncio.Future[None]] = {}
        self._background: set[asyncio.Task[None]] = set()

    # -- script plumbing ---------------------------------------------------------------------------

    def _argv(self, route: ModelRoute, exclude: frozenset[int] = frozenset()) -> list[Any]:
        caps = self.pool.caps(route, exclude)
        return [
            int(self.settings.lease_ttl_s * 1000),
            int(self.settings.state_ttl_s * 1000),
            self.keys[route.name].channel,
            ",".join(str(c) for c in caps),
            self._epoch[route.name],
            self.gateway_id,
            self._others[route.name],
        ]

    async def _run(self, script: Callable[..., Awaitable[Any]], route: ModelRoute, *args: Any, **kw: Any) -> Any:
        exclude: frozenset[int] = kw.get("exclude", frozenset())
        extra_keys: list[str] = kw.get("extra_keys", [])
        return await self.store.call(
            script(keys=[*self.keys[route.name].all(), *extra_keys], args=[*self._argv(route, exclude), *args])
        )

    def _prefix_keys(self, ticket: Ticket) -> list[str]:
        if ticket.route.routing != "prefix-affinity":
            return []
        keys = self.keys[ticket.route.name]
        return [keys.prefix(h) for h in ticket.prefix]

    # -- the request path --------------------------------------------------------------------------

    async def acquire(self, ticket: Ticket, exclude: frozenset[int] = frozenset(), front: bool = False) -> int:
        """Return the index of the upstream whose slot ``ticket`` now holds; raise if it may not."""
        route = ticket.route
        if not self.pool.any_available(route, exclude):
            await self.pool.probe_now(route, exclude)  # a half-open upstream may have recovered
            if not self.pool.any_available(route, exclude):
                retry = self.pool.next_probe_in(route, exclude)
                raise NoUpstream(f"no healthy upstream for model '{route.name}'", retry)
        self._tracked[route.name][ticket.id] = ticket
        deadline = ticket.arrived + route.max_queue_wait_s
        try:
            try:
                granted = await self.store.within(ticket.admit_by, self._admit(ticket, exclude, front))
            finally:
                ticket.admit_by = None
            if granted is None:
                granted = await self._wait(ticket, deadline, exclude)
                if prefix_keys := self._prefix_keys(ticket):  # granted from the queue: remember it too
                    args = [granted + 1, int(route.affinity_ttl_s * 1000)]
                    with contextlib.suppress(RedisUnavailable):
                        await self.store.call(self.store.scripts.remember(keys=prefix_keys, args=args))
        except BaseException:
            self._release_soon(ticket)  # not waited for: with Redis away it would wait its own timeout
            raise
        ticket.upstream = granted
        ticket.granted_at = time.monotonic()
        self.store.metrics.queue_wait.labels(route.name, ticket.priority_label).observe(ticket.waited_s())
        return granted

    async def _admit(self, ticket: Ticket, exclude: frozenset[int], front: bool) -> int | None:
        route = ticket.route
        self.grants.future(ticket.id)
        prefix_keys = self._prefix_keys(ticket)
        for _ in range(3):
            res = await self._run(
                self.store.scripts.admit,
                route,
                ticket.id,
                ticket.tenant,
                ticket.klass,
                route.max_queue_length,
                "1" if front else "0",
                int(route.affinity_ttl_s * 1000),
                route.affinity_max_imbalance,
                int(ticket.prefix[0][:8], 16) if ticket.prefix else 0,
                exclude=exclude,
                extra_keys=prefix_keys,
            )
            code = int(res[0])
            if code != 4:
                break
            await self._resync(route, text(res[1]))  # a new epoch: our running requests count first
        else:
            raise RedisUnavailable("queue state keeps being reset; try again shortly")
        if code == 1:
            self.grants.forget(ticket.id)
            ticket.affinity = text(res[2]) if len(res) > 2 else ""
            if ticket.affinity:
                self.store.metrics.affinity.labels(route.name, ticket.affinity).inc()
            return int(res[1]) - 1
        if code == 3:
            raise QueueFull(f"queue for model '{route.name}' is full ({route.max_queue_length} waiting)")
        if not ticket.position:
            ticket.position = int(res[1]) + 1
        if int(res[2]) > 0:  # grants wait for other gateways to re-register: dispatch when that ends
            self._dispatch_after(route, int(res[2]) / 1000)
        return None

    async def _wait(self, ticket: Ticket, deadline: float, exclude: frozenset[int]) -> int:
        # an interactive request preempts a batch line once it has waited batch_preempt_after_s, and
        # again at each safety re-check while it still waits (each preemption frees one slot)
        preempts = self.settings.batch_preempt and ticket.priority != BATCH_PRIORITY
        preempt_at = time.monotonic() + self.settings.batch_preempt_after_s if preempts else math.inf
        recheck_at = time.monotonic() + self.settings.recheck_interval_s * random.uniform(0.8, 1.2)
        while True:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                raise QueueTimeout(f"waited {ticket.route.max_queue_wait_s:g}s in the queue for a slot")
            fut = self.grants.future(ticket.id)
            if now >= preempt_at:
                await self._preempt(ticket)  # a grant meanwhile resolves ``fut``: the wait below returns at once
                preempt_at = now + max(self.settings.batch_preempt_after_s, self.settings.recheck_interval_s)
            timeout = max(0.0, min(remaining, recheck_at - now, preempt_at - now))
            done, _ = await asyncio.wait({fut}, timeout=timeout)
            if done and fut.result() != RECHECK:
                self.grants.forget(ticket.id)
                return fut.result()
            if not done and time.monotonic() < recheck_at:
                continue  # woken to preempt, not to re-check
            recheck_at = time.monotonic() + self.settings.recheck_interval_s * random.uniform(0.8, 1.2)
            state = await self._state(ticket)
            if state is not None and state.startswith("g|"):
                self.grants.forget(ticket.id)
                return int(state[2:]) - 1
            if state == "":  # lost (Redis restarted or our heartbeat lapsed): queue again, in front
                log.info("request %s lost its queue entry; re-admitting", ticket.id)
                with contextlib.suppress(RedisUnavailable):
                    granted = await self._admit(ticket, exclude, front=True)
                    if granted is not None:
                        return granted

    async def _preempt(self, ticket: Ticket) -> None:
        """Abort the youngest batch line holding one of the model's slots, if any, so that its slot
        comes to the queue's head (``PREEMPT_BATCH``; the runner running it puts the line back)."""
        route = ticket.route
        try:
            got = await self._run(
                self.store.scripts.preempt_batch, route, ticket.id, extra_keys=[self.keys[route.name].batch]
            )
        except RedisUnavailable:
            return
        if got:
            self.store.metrics.batch_preemptions.labels(route.name).inc()
            log.info("request %s preempted batch line %s", ticket.id, text(got))

    async def _state(self, ticket: Ticket) -> str | None:
        """``g|i``, ``q|...``, ``""`` when Redis knows nothing of it, ``None`` when Redis is down."""
        try:
            raw = await self.store.redis.hget(self.keys[ticket.route.name].waiters, ticket.id)
        except (RedisError, OSError):
            self.store.metrics.redis_errors.inc()
            return None
        if raw is None:
            return ""
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    async def release(self, ticket: Ticket) -> None:
        """Leave the queue or give the slot back, and hand it to the next waiter (idempotent).

        Releases are group-committed: the ids released while one ``RELEASE`` call is on its way
        go together in the next one (one script run and one round trip for the lot), by a flusher
        task of their own, so a caller cancelled while waiting does not stop the release.
        """
        self.grants.forget(ticket.id)
        name = ticket.route.name
        self._tracked[name].pop(ticket.id, None)
        ticket.upstream = None
        batch = self._releasing.get(name)
        if batch is None:
            batch = self._releasing[name] = ([], asyncio.get_running_loop().create_future())
            if name not in self._flushing:
                self._flushing[name] = asyncio.ensure_future(self._flush_releases(ticket.route))
        batch[0].append(ticket.id)
        await asyncio.shield(batch[1])

    async def _flush_releases(self, route: ModelRoute) -> None:
        try:
            while (batch := self._releasing.pop(route.name, None)) is not None:
                ids, done = batch
                try:
                    await self._run(self.store.scripts.release, route, *ids)
                except RedisUnavailable:
                    log.warning("release of %d request(s) failed: Redis down; their leases expire", len(ids))
                finally:
                    if not done.done():
                        done.set_result(None)
        finally:
            self._flushing.pop(route.name, None)

    def _release_soon(self, ticket: Ticket) -> None:
        task = asyncio.ensure_future(self.release(ticket))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- background work ---------------------------------------------------------------------------

    async def listen_forever(self) -> None:
        """The grant listener; when Redis comes back after a loss our leases count again at once."""
        await self.grants.listen_forever(self.renew_once)

    async def renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.lease_ttl_s / 3)
            await self.renew_once()

    async def renew_once(self) -> None:
        for name in self._tracked:
            with contextlib.suppress(RedisUnavailable):
                await self._renew(name)

    async def _renew(self, name: str) -> None:
        """Extend this gateway's leases of one model (re-creating them in a new epoch); flag lost ones."""
        route = self.config.models[name]
        entries = [f"{rid}|{0 if t.upstream is None else t.upstream + 1}" for rid, t in self._tracked[name].items()]
        epoch, others, lost = await self._run(self.store.scripts.renew, route, *entries)
        self._epoch[name] = text(epoch)
        self._others[name] = int(others)
        for raw in lost or []:
            self.grants.resolve(text(raw), RECHECK)

    @property
    def tracked(self) -> dict[str, dict[str, Ticket]]:
        """This process's requests per model, queued or running (read by the console)."""
        return self._tracked

    def peers(self, model: str) -> int:
        """Other gateways with requests of ``model``, as of our last renewal."""
        return self._others[model]

    async def _resync(self, route: ModelRoute, epoch: str) -> None:
        async with self._resync_locks[route.name]:
            if self._epoch[route.name] == epoch:
                return  # another request of ours re-registered meanwhile
            if self._epoch[route.name]:  # not merely our first request of this model
                running = sum(t.upstream is not None for t in self._tracked[route.name].values())
                log.warning("model %s: queue state lost; re-registering %d running request(s)", route.name, running)
            await self._renew(route.name)

    def _dispatch_after(self, route: ModelRoute, delay_s: float) -> None:
        if route.name not in self._holds:
            task = asyncio.ensure_future(self._reclaim_later(route, delay_s))
            self._holds[route.name] = task
            task.add_done_callback(lambda _: self._holds.pop(route.name, None))

    async def _reclaim_later(self, route: ModelRoute, delay_s: float) -> None:
        await asyncio.sleep(delay_s + 0.01)
        with contextlib.suppress(RedisUnavailable):
            await self._run(self.store.scripts.reclaim, route)

    async def reclaim_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reclaim_every_s() * random.uniform(0.8, 1.2))
            await self.reclaim_once()

    async def reclaim_once(self) -> None:
        for route in self.config.models.values():
            with contextlib.suppress(RedisUnavailable):
                await self._run(self.store.scripts.reclaim, route)

    async def depths(self) -> dict[tuple[str, int], int]:
        """Queue depth per (model, priority), read from Redis."""
        out: dict[tuple[str, int], int] = {}
        async with self.store.redis.pipeline(transaction=False) as pipe:
            for keys in self.keys.values():
                for prio in range(10):
                    klass = str(9 - prio)
                    pipe.zlexcount(keys.queue, f"[{klass}", f"({klass}~")
            results = await pipe.execute()
        i = 0
        for name in self.keys:
            for prio in range(10):
                out[(name, prio)] = int(results[i])
                i += 1
        return out

    async def depths_by_kind(self) -> dict[tuple[str, str], int]:
        """Queue depth per (model, ``interactive`` | ``batch``), read from Redis."""
        out: dict[tuple[str, str], int] = {}
        async with self.store.redis.pipeline(transaction=False) as pipe:
            for keys in self.keys.values():
                pipe.zlexcount(keys.queue, "[0", "(9~")
                pipe.zlexcount(keys.queue, f"[{BATCH_CLASS}", f"({BATCH_CLASS}~")
            results = await pipe.execute()
        for i, name in enumerate(self.keys):
            out[(name, "interactive")] = int(results[2 * i])
            out[(name, "batch")] = int(results[2 * i + 1])
        return out

    async def batch_running(self) -> dict[str, int]:
        """Batch lines holding one of each model's batch slots (all replicas)."""
        now_ms = int(time.time() * 1000)
        return {
            name: int(await self.store.redis.zcount(keys.batch, now_ms, "+inf")) for name, keys in self.keys.items()
        }

    async def in_flight(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        now_ms = int(time.time() * 1000)
        for name, keys in self.keys.items():
            route = self.config.models[name]
            for up, slot in zip(route.upstreams, keys.slots, strict=True):
                out[(name, up.name)] = int(await self.store.redis.zcount(slot, now_ms, "+inf"))
        return out
