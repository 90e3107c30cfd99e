"""Storage quotas and the Redis budget: every stored byte is admitted BEFORE it is written.

Three checks, in this order, each refusing with an OpenAI error that names the quota and its value:

- the Redis budget: Redis' ``used_memory`` plus the new bytes must stay ``storage_headroom_bytes``
  below its ``maxmemory`` (``INFO memory``, read at most once a second), so the queues, leases and rate
  windows every tenant needs always have room: 507 ``storage_full`` with Retry-After;
- all keys' stored files together (``files_total_max_bytes``): 507 ``storage_full`` with Retry-After;
- one key's files (``files_key_max_bytes``, ``files_key_max_count``): 413 ``quota_exceeded``.

The two file quotas are ledgers (``lua/reserve.lua``): a ZSET of file id -> expiry ms and a HASH of
their bytes. A file expiring with its TTL stops counting at the next reservation (past-expiry entries
are dropped in the script), deleting a file gives its bytes back in ``lua/delete_file.lua``: no sweeper.
The total ledger lives in its own hash slot (``{storage}``), so it is a second script call: a crash
between the two leaves a total entry that lapses with the file's TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from genmesh.protocol import OpenAIError

from ..redis.client import RedisClient, text
from ..settings import GatewaySettings

BUDGET_CACHE_S = 1.0  # Redis' INFO memory is read at most this often per replica
MIB = 1024 * 1024
HEADROOM_MAX = 256 * MIB  # the derived headroom: a quarter of maxmemory, at most this
NO_MAXMEMORY_TOTAL = 1536 * MIB  # the total file quota derived when Redis has no maxmemory


@dataclass(frozen=True)
class StorageBounds:
    """The Redis budget's headroom and the file quotas in force (0: none)."""

    headroom: int
    total: int
    per_key: int


def storage_bounds(settings: GatewaySettings, maxmemory: int) -> StorageBounds:
    """The bounds an operator set, and those left unset derived from Redis' ``maxmemory`` so that they
    fit it: the headroom a quarter of it (at most 256 MiB), the files of all keys 6/7 of what is left,
    one key's a third of those (on the shipped 2 GiB Redis: 256 MiB, 1.5 GiB, 512 MiB; on 256 MiB:
    64 MiB, 164.6 MiB, 54.9 MiB). Without a maxmemory: no headroom check, 1.5 GiB and 512 MiB."""
    headroom = settings.storage_headroom_bytes
    if headroom is None:
        headroom = min(HEADROOM_MAX, maxmemory // 4)
    total = settings.files_total_max_bytes
    if total is None:
        total = max(0, maxmemory - headroom) * 6 // 7 if maxmemory > 0 else NO_MAXMEMORY_TOTAL
        total = max(total, 1)  # never "none" by derivation
    per_key = settings.files_key_max_bytes
    if per_key is None:
        per_key = max(total // 3, 1)
    return StorageBounds(headroom, total, per_key)


def quota_exceeded(quota: str, value: int, what: str, status: int = 413) -> OpenAIError:
    """Past a per-key quota: a 4xx naming the quota (the setting) and its value."""
    return OpenAIError(
        f"{what}: quota {quota} is {value}; delete some first or wait for them to expire",
        status=status,
        type="invalid_request_error",
        param=None,
        code="quota_exceeded",
    )


def storage_full(message: str, retry_after_s: int = 60) -> OpenAIError:
    """The shared store is at its budget: 507, Retry-After (others' files expire or are deleted)."""
    return OpenAIError(
        message, status=507, type="server_error", code="storage_full", headers={"Retry-After": str(retry_after_s)}
    )


class Quotas:
    def __init__(self, store: RedisClient, settings: GatewaySettings) -> None:
        self.store = store
        self.settings = settings
        self.ttl_ms = int(settings.files_ttl_s * 1000)
        self._memory: tuple[float, int, int] = (0.0, 0, 0)  # read at, used_memory, maxmemory
        self._busy = 0  # uploads and batch creations running in this replica
        self.pending = 0  # bytes of this replica's uploads admitted but maybe not yet in used_memory

    # -- concurrency -------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One of ``files_max_concurrent`` uploads or batch creations of this replica; past it a 429."""
        limit = self.settings.files_max_concurrent
        if self._busy >= limit:
            raise OpenAIError(
                f"this gateway is handling {limit} uploads and batch creations (files_max_concurrent); retry shortly",
                status=429,
                type="rate_limit_error",
                code="too_many_concurrent_uploads",
                headers={"Retry-After": "1"},
            )
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1

    # -- the Redis budget --------------------------------------------------------------------------

    async def memory(self) -> tuple[int, int]:
        """Redis' ``used_memory`` and ``maxmemory`` (0: none), at most ``BUDGET_CACHE_S`` old."""
        at, used, maximum = self._memory
        if time.monotonic() - at >= BUDGET_CACHE_S:
            info: Any = await self.store.call(self.store.redis.info("memory"))
            used, maximum = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
            self._memory = (time.monotonic(), used, maximum)
        return used, maximum

    async def bounds(self) -> StorageBounds:
        """The headroom and file quotas in force (``storage_bounds`` on Redis' maxmemory, read at most
        once a second)."""
        return storage_bounds(self.settings, (await self.memory())[1])

    async def budget(self, incoming: int) -> None:
        """Refuse ``incoming`` new bytes that would bring Redis within the headroom of its maxmemory."""
        used, maximum = await self.memory()
        if maximum <= 0:
            return
        limit = maximum - storage_bounds(self.settings, maximum).headroom
        if used + self.pending + incoming > limit:  # concurrent uploads each count the others in flight
            raise storage_full(
                f"the shared store is full: {used + self.pending + incoming} bytes would pass its budget of {limit} "
                "(Redis maxmemory less storage_headroom_bytes); try again later"
            )

    # -- file ledgers ------------------------------------------------------------------------------

    async def reserve_file(self, owner: str, file_id: str, size: int, per_key: bool) -> None:
        """Count a new file of ``size`` bytes against the total (and, ``per_key``, its owner's) quotas,
        before any of its bytes is stored; refused: nothing is counted."""
        await self.budget(size)
        bounds = await self.bounds()
        expiry = int(time.time() * 1000) + self.ttl_ms
        total = self.store.keyspace.storage_quota()
        limit = bounds.total
        res = await self._reserve(total, f"{owner}|{file_id}", size, expiry, 0, limit)
        if res[0] != 0:
            raise storage_full(
                f"the shared file store holds {res[2]} bytes; {size} more would pass files_total_max_bytes ({limit})"
            )
        if not per_key:
            return
        s = self.settings
        res = await self._reserve(
            self.store.keyspace.file_quota(owner), file_id, size, expiry, s.files_key_max_count, bounds.per_key
        )
        if res[0] == 0:
            return
        await self.release_total(owner, file_id)
        if res[0] == 1:
            raise quota_exceeded("files_key_max_count", s.files_key_max_count, f"this key holds {res[1]} files")
        raise quota_exceeded(
            "files_key_max_bytes",
            bounds.per_key,
            f"this key's files hold {res[2]} bytes; this one ({size} bytes) does not fit",
        )

    async def shrink_file(self, owner: str, file_id: str, size: int) -> None:
        """A file reserved at an upper bound (its upload's length) counted at its stored ``size``."""
        expiry = int(time.time() * 1000) + self.ttl_ms
        await self._reserve(self.store.keyspace.storage_quota(), f"{owner}|{file_id}", size, expiry, 0, 0)
        await self._reserve(self.store.keyspace.file_quota(owner), file_id, size, expiry, 0, 0)

    async def _reserve(
        self, ledger: tuple[str, str], member: str, size: int, expiry: int, count: int, limit: int
    ) -> list[int]:
        args: list[Any] = [member, size, expiry, count, limit, self.ttl_ms]
        res = await self.store.call(self.store.scripts.reserve(keys=list(ledger), args=args))
        return [int(v) for v in res]

    # -- stored responses --------------------------------------------------------------------------

    async def responses_full(self, owner: str) -> OpenAIError | None:
        """The error a ``store: true`` request of ``owner`` gets before it runs, None while it has room."""
        limit = self.settings.responses_key_max_count
        expiry = self.store.keyspace.response_quota(owner)[0]
        now_ms = int(time.time() * 1000)
        held: Any = await self.store.call(self.store.redis.zcount(expiry, now_ms, "+inf"))
        if int(held) < limit:
            return None
        return quota_exceeded("responses_key_max_count", limit, f"this key holds {held} stored responses", status=429)

    async def reserve_response(self, owner: str, response_id: str, size: int) -> None:
        """Count a response about to be stored; past the key's quota or the Redis budget: refused."""
        await self.budget(size)
        ttl_ms = int(self.settings.responses_ttl_s * 1000)
        expiry = int(time.time() * 1000) + ttl_ms
        limit = self.settings.responses_key_max_count
        ledger = self.store.keyspace.response_quota(owner)
        args: list[Any] = [response_id, size, expiry, limit, 0, ttl_ms]
        res = await self.store.call(self.store.scripts.reserve(keys=list(ledger), args=args))
        if int(res[0]) != 0:
            raise quota_exceeded("responses_key_max_count", limit, f"this key holds {int(res[1])} stored responses")

    async def release_response(self, owner: str, response_id: str) -> None:
        ledger = self.store.keyspace.response_quota(owner)
        await self.store.call(self.store.scripts.unreserve(keys=list(ledger), args=[response_id]))

    async def count_output(self, owner: str, file_id: str, size: int, ttl_ms: int) -> None:
        """Count a batch's output file in the total (never refused: its bytes were admitted line by line)."""
        expiry = int(time.time() * 1000) + ttl_ms
        await self._reserve(self.store.keyspace.storage_quota(), f"{owner}|{file_id}", size, expiry, 0, 0)

    async def release_total(self, owner: str, file_id: str) -> None:
        await self.store.call(
            self.store.scripts.unreserve(keys=list(self.store.keyspace.storage_quota()), args=[f"{owner}|{file_id}"])
        )

    async def release_key(self, owner: str, file_id: str) -> None:
        await self.store.call(
            self.store.scripts.unreserve(keys=list(self.store.keyspace.file_quota(owner)), args=[file_id])
        )

    async def usage(self, owner: str) -> tuple[int, int]:
        """The files and bytes ``owner``'s ledger counts now (for tests and the console)."""
        z, h = self.store.keyspace.file_quota(owner)
        count: Any = await self.store.call(self.store.redis.zcard(z))
        total: Any = await self.store.call(self.store.redis.hget(h, "#"))
        return int(count), int(text(total or b"0"))


async def released(quotas: Quotas, owner: str, file_id: str) -> None:
    """Give a file's reservations back, whatever fails (after an upload that could not finish)."""
    with contextlib.suppress(Exception):
        await asyncio.shield(quotas.release_key(owner, file_id))
    with contextlib.suppress(Exception):
        await asyncio.shield(quotas.release_total(owner, file_id))
