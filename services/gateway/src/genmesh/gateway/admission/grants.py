"""The grant listener: this process's waiting requests, woken by the grants published in Redis.

Whoever frees a slot grants it to the head of the queue and publishes ``<id>|<upstream>`` on
the model's channel; the listener resolves that request's future at once (``!<lease id>`` on it
preempts a batch line: ``on_preempt``, the batch runner, aborts it if it runs here). A future
resolved with ``RECHECK`` tells its request to read its state from Redis instead (after a reconnect, or
when a renewal found its entry lost). Revocations of API keys come on a channel of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from ..metrics import GatewayMetrics

log = logging.getLogger("genmesh.gateway.queue")
RECHECK = -1  # a future resolved with this means "read your state from Redis now"


class GrantListener:
    def __init__(
        self,
        redis: Redis,
        metrics: GatewayMetrics,
        channels: Iterable[str],
        revocations: str,
        on_revoked: Callable[[str | None], None] | None = None,
    ) -> None:
        self.redis = redis
        self.metrics = metrics
        self.channels = [*channels, revocations]
        self.revocations = revocations
        self.on_revoked = on_revoked
        self.waiting: dict[str, asyncio.Future[int]] = {}
        self.listening = False
        self.on_preempt: Callable[[str], None] | None = None  # set by the batch runner

    def future(self, rid: str) -> asyncio.Future[int]:
        """The future ``rid`` waits on: a fresh one when none is pending."""
        fut = self.waiting.get(rid)
        if fut is None or fut.done():
            fut = self.waiting[rid] = asyncio.get_running_loop().create_future()
        return fut

    def forget(self, rid: str) -> None:
        self.waiting.pop(rid, None)

    def resolve(self, rid: str, value: int) -> None:
        fut = self.waiting.get(rid)
        if fut is not None and not fut.done():
            fut.set_result(value)

    def poke_all(self) -> None:
        """Make every waiting request re-read its state from Redis now."""
        for rid in list(self.waiting):
            self.resolve(rid, RECHECK)

    def _on_message(self, channel: bytes | str, data: bytes | str) -> None:
        text = data.decode() if isinstance(data, bytes) else data
        if self.on_revoked is not None and (channel.decode() if isinstance(channel, bytes) else channel) == (
            self.revocations
        ):
            self.on_revoked(text)
            return
        if text.startswith("!"):
            if self.on_preempt is not None:
                self.on_preempt(text[1:])
            return
        rid, _, idx = text.rpartition("|")
        self.resolve(rid, int(idx) - 1)

    async def listen_forever(self, on_reconnect: Callable[[], Awaitable[None]]) -> None:
        """Listen until cancelled; ``on_reconnect`` runs when Redis comes back after a loss."""
        backoff = 0.1
        lost = False
        while True:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(*self.channels)
                if lost:  # Redis is back (perhaps restarted, empty): our leases count again at once
                    await on_reconnect()
                lost = False
                self.listening = True
                backoff = 0.1
                self.poke_all()  # grants published while we were away are found by re-reading state
                if self.on_revoked is not None:
                    self.on_revoked(None)  # so are revocations: forget every cached API key
                while True:
                    msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if msg is not None and msg.get("type") == "message":
                        self._on_message(msg["channel"], msg["data"])
            except (RedisError, OSError) as exc:
                if self.listening:
                    log.warning("grant listener lost Redis (%s); reconnecting", type(exc).__name__)
                self.listening = False
                lost = True
                self.metrics.redis_errors.inc()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
