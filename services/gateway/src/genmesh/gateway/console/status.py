"""The console's status: computed once per interval per replica while a console is open, shared by every viewer.

Nobody watching, nothing computed: the loop only checks, once per interval, whether a console is
open on another replica (``console_viewed`` in Redis, set by the replica serving it). While one is
open, every replica publishes its own activity (``activity.py``) each interval, and the replica
serving the console reads the shared picture from Redis: every live replica's activity, the queues
by priority, the slot leases per upstream, the API keys' windows, and the charts' history, to which
it appends one sample unless another replica already did in this interval (``SAMPLE`` in
``redis/scripts.py``). The engines' metrics are read over HTTP. Viewers get the last snapshot, so a
hundred open consoles cost what one does. Redis away: the snapshot says so (``redis.ok`` false) and
keeps what this replica knows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import Any

import aiohttp
import orjson
from redis.exceptions import RedisError

from ..admission.auth import ApiKey
from ..redis.client import text
from ..redis.keys import CONSOLE_HISTORY_SERIES
from . import engine_metrics
from .sections import model_rows, percentile, upstream_rows
from .sources import BoardSources

log = logging.getLogger("genmesh.gateway.console")

SCHEMA_VERSION = 1
MAX_WAITING_LISTED = 200  # per replica: waiting requests published with tenant and age
RECENT_BATCHES_PER_KEY = 3  # finished batches leave the active index: each listed key's latest stay in view
FULL_HISTORY_EVERY = 60  # computations: the charts are read in full this often, else only their new samples


class StatusBoard:
    def __init__(self, st: BoardSources) -> None:
        self.st = st
        self.settings = st.settings
        self.snapshot: dict[str, Any] = {"schema": SCHEMA_VERSION, "computed_at": None, "seq": 0}
        self.body = orjson.dumps(self.snapshot)  # the snapshot as served: serialized once, not per viewer
        self.computations = 0
        self.viewed_at = -math.inf  # monotonic time of the last /console/status served here
        self.watching = False  # the loop's state: computing for a viewer here
        self._wake = asyncio.Event()  # a first view while not watching: compute now, not at the next tick
        self._computed = asyncio.Event()  # set (and replaced) after each computation
        self._history: dict[str, list[list[float | None]]] = {}  # the charts, read from Redis incrementally
        self._history_ms = 0  # the time (ms, Redis's clock) of the newest sample read
        self._session: aiohttp.ClientSession | None = None  # the engines' metrics, opened on first use

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    def viewed(self) -> None:
        """A viewer asked for the status: keep computing (and the other replicas publishing) a while."""
        self.viewed_at = time.monotonic()
        if not self.watching:
            self._wake.set()

    def fresh(self) -> bool:
        at = self.snapshot.get("computed_at")
        return at is not None and time.time() - at < 2 * self.settings.console_interval_s + 1

    async def wait_fresh(self) -> None:
        """A view after a quiet spell: wait (a bounded while) for the computation it woke."""
        if not self.fresh():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._computed.wait(), max(2.0, self.settings.console_interval_s))

    def watched(self) -> bool:
        return time.monotonic() - self.viewed_at < self.settings.console_viewed_ttl_s

    async def run_forever(self) -> None:
        while True:
            started = time.monotonic()
            self.watching = self.watched()
            try:
                if self.watching:
                    await self.refresh()
                else:
                    await self.publish_if_viewed()
            except Exception:  # the console must never take the gateway down
                log.exception("console status failed")
            delay = max(0.05, self.settings.console_interval_s - (time.monotonic() - started))
            if self.watching:
                await asyncio.sleep(delay)
            elif not self.watched():  # (else a view came meanwhile: compute at once)
                self._wake.clear()  # a view here wakes the loop at once
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)

    async def publish_if_viewed(self) -> None:
        """No console here: publish this replica's activity only while one is open on another replica."""
        st = self.st
        with contextlib.suppress(RedisError, OSError):
            if await st.redis.exists(st.keyspace.console_viewed()):
                async with st.redis.pipeline(transaction=False) as pipe:
                    self._publish(pipe)
                    await pipe.execute()
        self._history, self._history_ms = {}, 0  # not followed meanwhile: read in full when viewed again

    def _publish(self, pipe: Any) -> None:
        st = self.st
        mine = {
            "at": time.time(),
            "models": st.activity.snapshot(self.settings.console_window_s),
            "waiting": self._waiting_here(),
        }
        replicas_key = st.keyspace.console_replicas()
        pipe.hset(replicas_key, st.admission.gateway_id, orjson.dumps(mine))
        pipe.pexpire(replicas_key, int(self._stale_s() * 1000) * 10)

    def _stale_s(self) -> float:
        return 3 * self.settings.console_interval_s + 2

    async def refresh(self) -> None:
        self.computations += 1
        st = self.st
        snap: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "seq": self.computations,
            "computed_at": time.time(),
            "interval_s": self.settings.console_interval_s,
            "window_s": self.settings.console_window_s,
            "gateway_id": st.admission.gateway_id,
            "auth_required": st.auth_required,
        }
        engines = await self._engines()
        redis_ok, error, shared = True, None, {}
        try:
            shared = await self._shared()
        except (RedisError, OSError) as exc:
            redis_ok, error = False, f"Redis unavailable: {type(exc).__name__}"
            self._history, self._history_ms = {}, 0
        snap["redis"] = {"ok": redis_ok, "error": error, "location": self.settings.redis_location()}
        snap["replicas"] = shared.get("replicas", 1)
        snap["models"] = model_rows(self.st.config, shared, shared.get("waiting", self._waiting_here()))
        snap["upstreams"] = upstream_rows(self.st.pool, shared, engines)
        snap["keys"] = shared.get("keys", [])
        snap["batches"] = shared.get("batches", [])
        snap["history"] = shared.get("history", {name: [] for name in CONSOLE_HISTORY_SERIES})
        snap["compute_ms"] = round((time.time() - snap["computed_at"]) * 1000, 3)
        self.snapshot = snap
        self.body = orjson.dumps(snap)
        done, self._computed = self._computed, asyncio.Event()
        done.set()

    # -- what this replica knows ----------------------------------------------------------------

    def _waiting_here(self) -> list[list[Any]]:
        now = time.monotonic()
        out = []
        for model, tickets in self.st.admission.tracked.items():
            for t in list(tickets.values()):
                if t.upstream is None and t.granted_at is None:
                    out.append([model, t.priority, t.tenant, round(now - t.arrived, 3)])
        return out[:MAX_WAITING_LISTED]

    async def _engines(self) -> dict[tuple[str, str], dict[str, Any]]:
        pairs = [(m, u) for m, pool in self.st.pool.models.items() for u in pool]
        timeout = min(self.settings.health_timeout_s, self.settings.console_interval_s)
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), cookie_jar=aiohttp.DummyCookieJar()
            )
        session = self._session
        results = await asyncio.gather(
            *(engine_metrics.scrape(session, u.config.metrics_url or u.url + "/metrics", timeout) for _, u in pairs)
        )
        return {(m, u.name): r for (m, u), r in zip(pairs, results, strict=True)}

    # -- the shared picture, from Redis -------------------------------------------------------------

    async def _shared(self) -> dict[str, Any]:
        st = self.st
        ks = st.keyspace
        interval_ms = int(self.settings.console_interval_s * 1000)
        replicas_key = ks.console_replicas()
        stale_s = self._stale_s()
        async with st.redis.pipeline(transaction=False) as pipe:
            pipe.set(ks.console_viewed(), st.admission.gateway_id, px=int(self.settings.console_viewed_ttl_s * 1000))
            self._publish(pipe)
            pipe.hgetall(replicas_key)
            await_results = await pipe.execute()
        raw_replicas: dict[Any, Any] = await_results[-1]
        replicas: list[dict[str, Any]] = []
        gone = []
        for rid, blob in raw_replicas.items():
            with contextlib.suppress(ValueError):
                rec = orjson.loads(blob)
                if rec.get("at", 0) >= time.time() - stale_s:
                    replicas.append(rec)
                    continue
            gone.append(rid)
        if gone:
            await st.redis.hdel(replicas_key, *gone)
        depths = await st.admission.depths()
        in_flight = await st.admission.in_flight()
        keys = await self._keys()
        batches = await self._batches(keys)
        totals = self._aggregate(replicas)
        depth_all = sum(depths.values())
        ttfts = [x for m in totals.values() for x in m["ttfts"]]
        sample = [
            depth_all,
            round(sum(m["tokens_per_s"] for m in totals.values()), 3),
            _arg(percentile(ttfts, 0.5)),
            _arg(percentile(ttfts, 0.99)),
            round(sum(m["rate_429"] for m in totals.values()), 3),
            round(sum(m["rate_5xx"] for m in totals.values()), 3),
        ]
        history_keys = ks.console_history()
        horizon_ms = int(self.settings.console_history_s * 1000)
        await st.scripts.sample(keys=history_keys, args=[int(interval_ms * 0.8), horizon_ms, *sample])
        return {
            "replicas": len(replicas),
            "totals": totals,
            "waiting": [w for r in replicas for w in r.get("waiting", [])],
            "depths": depths,
            "in_flight": in_flight,
            "keys": keys,
            "batches": batches,
            "history": await self._read_history(history_keys, horizon_ms),
        }

    async def _read_history(self, history_keys: list[str], horizon_ms: int) -> dict[str, list[list[float | None]]]:
        """The charts: in full on the first computation (and every ``FULL_HISTORY_EVERY``), then only the
        samples newer than the last one read, kept here and trimmed to the horizon as Redis trims them."""
        st = self.st
        full = not self._history or self.computations % FULL_HISTORY_EVERY == 0
        since = "-inf" if full else f"({self._history_ms}"
        async with st.redis.pipeline(transaction=False) as pipe:
            for key in history_keys:
                pipe.zrangebyscore(key, since, "+inf")
            series = await pipe.execute()
        history = {} if full else self._history
        if full:
            self._history_ms = 0
        for name, members in zip(CONSOLE_HISTORY_SERIES, series, strict=True):
            points = history.setdefault(name, [])
            for member in members:
                ms, _, value = text(member).partition(":")
                self._history_ms = max(self._history_ms, int(ms))
                points.append([int(ms) / 1000, float(value) if value else None])
        horizon = time.time() - horizon_ms / 1000
        for points in history.values():
            cut = next((i for i, p in enumerate(points) if p[0] is not None and p[0] >= horizon), len(points))
            del points[:cut]
        self._history = history
        return {name: list(points) for name, points in history.items()}  # the snapshot's own: these grow

    @staticmethod
    def _aggregate(replicas: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        totals: dict[str, dict[str, Any]] = {}
        for rec in replicas:
            for model, m in rec.get("models", {}).items():
                t = totals.setdefault(
                    model,
                    {
                        "tokens_per_s": 0.0,
                        "requests_per_s": 0.0,
                        "rate_429": 0.0,
                        "rate_5xx": 0.0,
                        "waits": [],
                        "ttfts": [],
                    },
                )
                for k in ("tokens_per_s", "requests_per_s", "rate_429", "rate_5xx"):
                    t[k] += float(m.get(k, 0.0))
                t["waits"] += m.get("waits", [])
                t["ttfts"] += m.get("ttfts", [])
        return totals

    async def _keys(self) -> list[dict[str, Any]]:
        """Up to ``console_max_keys`` API keys with their minute windows: three pipelined round trips."""
        st = self.st
        cap = self.settings.console_max_keys
        if cap == 0:
            return []
        index: dict[Any, Any] = await st.redis.hgetall(st.keyspace.api_key_index())
        digests = [text(d) for _, d in sorted(index.items())][:cap]
        async with st.redis.pipeline(transaction=False) as pipe:
            for d in digests:
                pipe.hgetall(st.keyspace.api_key(d))
            records = await pipe.execute()
        listed = [ApiKey.from_redis(raw) for raw in records if raw]
        now_ms = int(time.time() * 1000)
        window = str(int(time.time()) // 60)
        async with st.redis.pipeline(transaction=False) as pipe:
            for k in listed:
                kk = st.keyspace.key_id(k.key_id)
                pipe.hgetall(kk.rate)
                pipe.zcount(kk.concurrent, now_ms, "+inf")
            raw = await pipe.execute()
        out = []
        for i, k in enumerate(listed):
            rate = {text(a): text(b) for a, b in raw[2 * i].items()}
            current = rate.get("w") == window
            out.append(
                {
                    "key_id": k.key_id,
                    "tenant": k.tenant,
                    "name": k.name,
                    "revoked": k.revoked,
                    "requests": int(rate.get("req", 0)) if current else 0,
                    "rpm": k.rpm,
                    "tokens": int(rate.get("tok", 0)) if current else 0,
                    "tpm": k.tpm,
                    "concurrent": int(raw[2 * i + 1]),
                    "max_concurrent": k.max_concurrent,
                }
            )
        return out

    async def _batches(self, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The batches runners still work on (every owner), and each listed key's latest few."""
        st = self.st
        cap = self.settings.console_max_batches
        if cap == 0:
            return []
        ks = st.keyspace
        owners = [k["key_id"] for k in keys]
        async with st.redis.pipeline(transaction=False) as pipe:
            pipe.zrevrange(ks.active_batches(), 0, cap - 1)
            for owner in owners:
                pipe.zrevrange(ks.batches(owner), 0, RECENT_BATCHES_PER_KEY - 1)
            found = await pipe.execute()
        pairs = [tuple(text(e).rpartition("|")[::2]) for e in found[0]]
        pairs += [(owner, text(b)) for owner, ids in zip(owners, found[1:], strict=True) for b in ids]
        pairs = list(dict.fromkeys(pairs))[:cap]
        async with st.redis.pipeline(transaction=False) as pipe:
            for owner, batch_id in pairs:
                pipe.hgetall(ks.batch(owner, batch_id).meta)
            metas = await pipe.execute()
        tenants = {k["key_id"]: k["tenant"] for k in keys}
        out = []
        for (owner, batch_id), raw in zip(pairs, metas, strict=True):
            meta = {text(k): text(v) for k, v in raw.items()}
            if not meta:
                continue
            out.append(
                {
                    "id": batch_id,
                    "owner": owner,
                    "tenant": tenants.get(owner, ""),
                    "status": meta.get("status", ""),
                    "endpoint": meta.get("endpoint", ""),
                    "created_at": int(meta.get("created_at", 0) or 0),
                    "total": int(meta.get("total", 0) or 0),
                    "completed": int(meta.get("completed", 0) or 0),
                    "failed": int(meta.get("failed", 0) or 0),
                }
            )
        out.sort(key=lambda b: -b["created_at"])
        return out


def _arg(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"
