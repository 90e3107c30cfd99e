"""The hot path: a free slot admits in the same script call (no queue entry), group-committed
releases give every slot back, and a cached API key is revoked at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import redis.asyncio

from genmesh.gateway.admission.auth import KeyStore
from genmesh.gateway.redis.keys import KeySpace
from support.polling import until


def _upstream(fake: Any) -> str:
    return str(fake.url).split("://", 1)[1]


async def _post(client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    return await client.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=60)


async def test_free_slot_admits_without_queueing_and_the_limit_holds(gw: Any, fake: Any, helpers: Any) -> None:
    key = gw.create_key()
    fake.hold(True)
    async with httpx.AsyncClient() as client:
        first = asyncio.create_task(_post(client, gw.url, helpers.chat("one", "first"), helpers.auth(key)))
        await until(lambda: fake.stats()["total"] >= 1, 10, "the first request to reach the upstream")
        assert gw.queue_depth("one") == 0  # admitted straight into the free slot
        assert gw.slots("one", _upstream(fake)) == 1
        second = asyncio.create_task(_post(client, gw.url, helpers.chat("one", "second"), helpers.auth(key)))
        await until(lambda: gw.queue_depth("one") == 1, 10, "the second request to queue")
        assert fake.stats()["in_flight"] == 1  # the slot is taken: no second request upstream
        fake.hold(False)
        r1, r2 = await asyncio.gather(first, second)
    assert (r1.status_code, r2.status_code) == (200, 200)
    assert r1.headers["x-queue-position"] == "0"
    assert r2.headers["x-queue-position"] == "1"
    assert fake.stats()["max_in_flight"] == 1
    await until(lambda: gw.slots("one", _upstream(fake)) == 0, 5, "slot released")


async def test_burst_keeps_the_limit_and_gives_every_slot_back(gw: Any, fake: Any, helpers: Any) -> None:
    key = gw.create_key()
    fake.control(delay_ms=0)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=64)) as client:
        bodies = [helpers.chat("quick", f"u{i}", stream=i % 2 == 0) for i in range(60)]
        replies = await asyncio.gather(*(_post(client, gw.url, b, helpers.auth(key)) for b in bodies))
    assert [r.status_code for r in replies] == [200] * 60
    assert fake.stats()["max_in_flight"] <= 2
    assert fake.stats()["completed"] == 60
    await until(lambda: gw.slots("quick", _upstream(fake)) == 0, 5, "every slot released")
    waiters = KeySpace().model("quick", []).waiters
    await until(lambda: gw.redis.hlen(waiters) == 0, 5, "no request state left behind")


async def test_revocation_reaches_a_cached_key_at_once(gw: Any, helpers: Any, redis_server: Any) -> None:
    secret = gw.create_key("cached")
    async with httpx.AsyncClient() as client:
        ok = await _post(client, gw.url, helpers.chat("one"), helpers.auth(secret))
        cached_at = time.monotonic()
        assert ok.status_code == 200  # the key is now in the gateway's lookup cache (1 s)
        store = KeyStore(redis.asyncio.Redis.from_url(redis_server.url), KeySpace())
        key = await store.lookup(secret)
        assert key is not None
        assert await store.revoke(key.key_id)  # as another replica or the CLI would
        await store.redis.aclose()
        replies: list[httpx.Response] = []

        async def refused() -> bool:
            replies.append(await _post(client, gw.url, helpers.chat("one"), helpers.auth(secret)))
            return replies[-1].status_code != 200

        # The push is asynchronous: asked until refused, within half the cache's lifetime.
        await until(refused, 0.5 - (time.monotonic() - cached_at), "the revocation to reach the cache", 0.01)
        revoked = replies[-1]
    assert revoked.status_code == 401, "the revocation was not pushed; the key was served from the cache"
    assert revoked.json()["error"]["code"] == "revoked_api_key"
