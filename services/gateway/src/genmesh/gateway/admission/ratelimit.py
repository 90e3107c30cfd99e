"""Per-key limits, exact across replicas: requests and tokens per minute, concurrent requests.

Requests per minute count at admission; audio seconds per minute (``aspm``) are added when an
audio reply starts (``audio_usage.py``) and refuse the key's next request past it until the window
turns; tokens per minute are added when a response's usage is
known, and a key already at its token budget is refused until the window turns. Concurrency is a
set of leases (request id -> expiry), renewed with the slot leases, so a dead gateway's requests
stop counting when their leases lapse.
"""

from __future__ import annotations

import asyncio
import contextlib

from redis.exceptions import RedisError

from genmesh.protocol import OpenAIError

from ..redis.client import RedisClient, text
from ..redis.keys import USAGE_TTL_S
from ..replies import too_many_requests, with_retry_after
from .auth import ApiKey

_LIMIT_MESSAGES = {
    "rpm": "requests per minute",
    "tpm": "tokens per minute",
    "concurrency": "concurrent requests",
    "aspm": "audio seconds per minute",
}


def rate_limited(kind: str, retry_after: int) -> OpenAIError:
    message = f"rate limit exceeded: {_LIMIT_MESSAGES.get(kind, kind)} for this API key"
    return with_retry_after(too_many_requests(message, code=f"rate_limit_exceeded_{kind}"), retry_after)


class Limiter:
    def __init__(self, store: RedisClient, lease_ttl_s: float) -> None:
        self.store = store
        self.redis = store.redis
        self.keyspace = store.keyspace
        self.lease_ttl_s = lease_ttl_s
        self._running: dict[str, set[str]] = {}

    async def acquire(self, key: ApiKey, request_id: str) -> None:
        if not key.key_id:
            return
        k = self.keyspace.key_id(key.key_id)
        ttl_ms = int(self.lease_ttl_s * 1000)
        res = await self.store.call(
            self.store.scripts.limit(
                keys=[k.rate, k.concurrent],
                args=[key.rpm, key.tpm, key.max_concurrent, request_id, ttl_ms, max(ttl_ms * 3, 60000), key.aspm],
            ),
        )
        kind = text(res[0])
        if kind != "ok":
            raise rate_limited(kind, int(res[1]))
        self._running.setdefault(key.key_id, set()).add(request_id)

    async def release(self, key: ApiKey, request_id: str) -> None:
        if not key.key_id:
            return
        ids = self._running.get(key.key_id)
        if ids is not None:
            ids.discard(request_id)
            if not ids:
                del self._running[key.key_id]
        with contextlib.suppress(RedisError, OSError):
            await self.redis.zrem(self.keyspace.key_id(key.key_id).concurrent, request_id)

    async def account(self, key: ApiKey, prompt_tokens: int, completion_tokens: int) -> None:
        self.store.metrics.tokens.labels(key.tenant, "prompt").inc(prompt_tokens)
        self.store.metrics.tokens.labels(key.tenant, "completion").inc(completion_tokens)
        if not key.key_id:
            return
        k = self.keyspace.key_id(key.key_id)
        with contextlib.suppress(RedisError, OSError):
            args = [prompt_tokens, completion_tokens, USAGE_TTL_S]
            await self.store.scripts.account(keys=[k.rate, k.usage], args=args)

    async def account_once(
        self, key: ApiKey, prompt_tokens: int, completion_tokens: int, charged: str, idx: int, ttl_ms: int
    ) -> None:
        """``account`` for a batch line, once per line: ``charged`` is its batch's SET of charged
        line indexes (in the key's hash slot), ``ttl_ms`` the batch's TTL. With Redis away the charge
        is lost, as ``account``'s is (the line's result is recorded in the same Redis)."""
        if not key.key_id:
            await self.account(key, prompt_tokens, completion_tokens)
            return
        k = self.keyspace.key_id(key.key_id)
        with contextlib.suppress(RedisError, OSError):
            args = [prompt_tokens, completion_tokens, USAGE_TTL_S, idx, ttl_ms]
            total = await self.store.scripts.account_once(keys=[k.rate, k.usage, charged], args=args)
            if int(total) >= 0:
                self.store.metrics.tokens.labels(key.tenant, "prompt").inc(prompt_tokens)
                self.store.metrics.tokens.labels(key.tenant, "completion").inc(completion_tokens)

    async def count_refused(self, key_id: str, n: int = 1) -> None:
        """``n`` refused requests that cost their key anyway (a model not served): counted in this
        minute's RPM window, as admitted ones are (lost with Redis away, as the refusal stands)."""
        if not key_id or n <= 0:
            return
        with contextlib.suppress(RedisError, OSError):
            await self.store.scripts.count_requests(keys=[self.keyspace.key_id(key_id).rate], args=[n])

    async def usage(self, key_id: str) -> dict[str, int]:
        raw = await self.redis.hgetall(self.keyspace.key_id(key_id).usage)
        out = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
        for k, v in raw.items():
            out[text(k)] = int(v)
        return out

    async def renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            await self.renew_once()

    async def renew_once(self) -> None:
        ttl_ms = int(self.lease_ttl_s * 1000)
        for key_id, ids in list(self._running.items()):
            if ids:
                with contextlib.suppress(RedisError, OSError):
                    await self.store.scripts.renew_concurrent(
                        keys=[self.keyspace.key_id(key_id).concurrent], args=[ttl_ms, *sorted(ids)]
                    )
