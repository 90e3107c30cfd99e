"""The gateway's Redis: the client, its scripts and the metrics, with one way to call them.

A Redis failure on the request path leaves as ``RedisUnavailable`` (the client gets a 503) and
is counted in ``genmesh_gateway_redis_errors``. ``within`` bounds a piece of Redis work by one
deadline, whatever calls (and client-side retries) it makes: a request's admission is given
``redis_timeout_s`` in all, so a frozen Redis becomes its 503 within that.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from ..metrics import GatewayMetrics
from .keys import KeySpace
from .scripts import Scripts

T = TypeVar("T")


class RedisUnavailable(Exception):
    """Redis could not be reached: the request gets a 503."""


@dataclass(frozen=True)
class RedisClient:
    """What the admission queue and the per-key limits share: Redis, its scripts, its key names."""

    redis: Redis
    scripts: Scripts
    keyspace: KeySpace
    metrics: GatewayMetrics

    async def call(self, call: Awaitable[T]) -> T:
        """Await one Redis call; a failure is counted and raised as ``RedisUnavailable``."""
        try:
            return await call
        except (RedisError, OSError) as exc:
            self.metrics.redis_errors.inc()
            raise RedisUnavailable(f"queue store unavailable: {type(exc).__name__}") from exc

    async def within(self, deadline: float | None, work: Awaitable[T]) -> T:
        """Await ``work`` (Redis calls) until ``deadline`` (``time.monotonic()``; None: its own
        calls' timeouts only); past it Redis counts as unavailable."""
        if deadline is None:
            return await work
        try:
            async with asyncio.timeout_at(deadline):
                return await work
        except TimeoutError as exc:
            self.metrics.redis_errors.inc()
            raise RedisUnavailable("queue store unavailable: no answer in time") from exc


async def start_after(store: RedisClient, index: str, after: str | None, missing: Exception) -> int:
    """Where a newest-first page of the ZSET ``index`` starts: past ``after`` (``missing`` raised
    when it is not there), or at the top."""
    if after is None:
        return 0
    rank: Any = await store.call(store.redis.zrevrank(index, after))
    if rank is None:
        raise missing
    return int(rank) + 1


def text(raw: bytes | str) -> str:
    """A Redis reply as text."""
    return raw.decode() if isinstance(raw, bytes) else str(raw)
