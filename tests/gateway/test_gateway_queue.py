"""Queue mechanics on the shared gateway: order by priority, fairness across tenants, limits, cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import httpx

from support.polling import until, wait_until


async def _post(client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    return await client.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=60)


async def _wait_depth(gw: Any, model: str, depth: int, timeout_s: float = 10) -> None:
    await until(lambda: gw.queue_depth(model) == depth, timeout_s, f"queue depth {depth}")


async def _wait_started(fake: Any, n: int, timeout_s: float = 10) -> None:
    await until(lambda: fake.stats()["total"] >= n, timeout_s, f"{n} requests to reach the upstream")


async def test_priority_before_backlog(gw: Any, fake: Any, helpers: Any) -> None:
    low = gw.create_key("lowco", priority=2)
    high = gw.create_key("highco", priority=8)
    fake.hold(True)
    async with httpx.AsyncClient() as client:
        tasks = [asyncio.create_task(_post(client, gw.url, helpers.chat("one", "blocker"), helpers.auth(low)))]
        await _wait_started(fake, 1)
        for i in range(5):
            tasks.append(asyncio.create_task(_post(client, gw.url, helpers.chat("one", f"low{i}"), helpers.auth(low))))
            await _wait_depth(gw, "one", i + 1)
        for i in range(2):
            tasks.append(
                asyncio.create_task(_post(client, gw.url, helpers.chat("one", f"high{i}"), helpers.auth(high)))
            )
            await _wait_depth(gw, "one", 6 + i)
        fake.hold(False)
        replies = await asyncio.gather(*tasks)
    assert [r.status_code for r in replies] == [200] * 8
    assert fake.stats()["order"] == ["blocker", "high0", "high1", "low0", "low1", "low2", "low3", "low4"]
    assert fake.stats()["max_in_flight"] == 1
    # the queue position is reported: the last low request had 4 ahead of it when it arrived
    assert replies[5].headers["x-queue-position"] == "5"


async def test_x_priority_header_within_key_allowance(gw: Any, fake: Any, helpers: Any) -> None:
    key = gw.create_key("prio", priority=3, max_priority=6)
    fake.hold(True)
    async with httpx.AsyncClient() as client:
        blocker = asyncio.create_task(_post(client, gw.url, helpers.chat("one", "blocker"), helpers.auth(key)))
        await _wait_started(fake, 1)
        normal = asyncio.create_task(_post(client, gw.url, helpers.chat("one", "normal"), helpers.auth(key)))
        await _wait_depth(gw, "one", 1)
        raised = asyncio.create_task(
            _post(client, gw.url, helpers.chat("one", "raised"), {**helpers.auth(key), "X-Priority": "6"})
        )
        await _wait_depth(gw, "one", 2)
        refused = await _post(client, gw.url, helpers.chat("one", "x"), {**helpers.auth(key), "X-Priority": "9"})
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "priority_not_allowed"
        fake.hold(False)
        await asyncio.gather(blocker, normal, raised)
    assert fake.stats()["order"] == ["blocker", "raised", "normal"]


async def test_tenants_share_fairly(gw: Any, fake: Any, helpers: Any) -> None:
    a = gw.create_key("tenant-a")
    b = gw.create_key("tenant-b")
    fake.control(hold=True, delay_ms=1)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=64)) as client:
        tasks = [asyncio.create_task(_post(client, gw.url, helpers.chat("one", "blocker", 1), helpers.auth(a)))]
        await _wait_started(fake, 1)
        for i in range(30):  # one at a time, so that arrival order is known
            tasks.append(asyncio.create_task(_post(client, gw.url, helpers.chat("one", f"A{i}", 1), helpers.auth(a))))
            await _wait_depth(gw, "one", i + 1)
        for i in range(3):
            tasks.append(asyncio.create_task(_post(client, gw.url, helpers.chat("one", f"B{i}", 1), helpers.auth(b))))
            await _wait_depth(gw, "one", 31 + i)
        fake.hold(False)
        replies = await asyncio.gather(*tasks)
    assert all(r.status_code == 200 for r in replies)
    order = fake.stats()["order"][1:]
    # A's 30 queued first; B's i-th request waits for at most one A turn per B request: A0 B0 A1 B1 A2 B2 ...
    positions = [order.index(f"B{i}") for i in range(3)]
    assert positions == [1, 3, 5], order[:8]
    assert [x for x in order if x.startswith("A")] == [f"A{i}" for i in range(30)]  # FIFO per tenant


async def test_full_queue_answers_429_with_retry_after(gw: Any, fake: Any, helpers: Any) -> None:
    key = gw.create_key()
    fake.hold(True)
    async with httpx.AsyncClient() as client:
        tasks = [asyncio.create_task(_post(client, gw.url, helpers.chat("tiny", "run"), helpers.auth(key)))]
        await _wait_started(fake, 1)
        for i in range(2):
            tasks.append(asyncio.create_task(_post(client, gw.url, helpers.chat("tiny", f"q{i}"), helpers.auth(key))))
            await _wait_depth(gw, "tiny", i + 1)
        r = await _post(client, gw.url, helpers.chat("tiny", "over"), helpers.auth(key))
        assert r.status_code == 429
        assert r.headers["retry-after"] == "3"
        assert r.json()["error"]["code"] == "queue_full"
        assert r.json()["error"]["type"] == "rate_limit_error"
        fake.hold(False)
        assert [t.status_code for t in await asyncio.gather(*tasks)] == [200, 200, 200]


async def test_waiting_too_long_answers_503_with_retry_after(gw: Any, fake: Any, helpers: Any) -> None:
    key = gw.create_key()
    fake.hold(True)
    async with httpx.AsyncClient() as client:
        running = asyncio.create_task(_post(client, gw.url, helpers.chat("tiny", "run"), helpers.auth(key)))
        await _wait_started(fake, 1)
        t0 = time.monotonic()
        r = await _post(client, gw.url, helpers.chat("tiny", "late"), helpers.auth(key))
        waited = time.monotonic() - t0
        assert r.status_code == 503
        assert r.headers["retry-after"] == "3"
        assert r.json()["error"]["code"] == "queue_timeout"
        assert 0.9 <= waited < 3.0
        assert gw.queue_depth("tiny") == 0
        fake.hold(False)
        assert (await running).status_code == 200
    assert "late" not in fake.stats()["order"]


async def test_queued_then_disconnected_leaves_queue(gw: Any, fake: Any, helpers: Any) -> None:
    key = gw.create_key()
    fake.hold(True)
    async with httpx.AsyncClient() as client:
        running = asyncio.create_task(_post(client, gw.url, helpers.chat("one", "run"), helpers.auth(key)))
        await _wait_started(fake, 1)
        queued = asyncio.create_task(_post(client, gw.url, helpers.chat("one", "gone"), helpers.auth(key)))
        await _wait_depth(gw, "one", 1)
        queued.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await queued
        t0 = time.monotonic()
        await _wait_depth(gw, "one", 0, timeout_s=1.0)
        assert time.monotonic() - t0 < 1.0
        fake.hold(False)
        assert (await running).status_code == 200
    await until(lambda: gw.slots("one", gw_upstream(fake)) == 0, 5, "slot released")
    assert fake.stats()["order"] == ["run"]


def gw_upstream(fake: Any) -> str:
    return str(fake.url).split("://", 1)[1]


def test_running_then_disconnected_aborts_upstream(gw: Any, fake: Any, helpers: Any) -> None:
    key = gw.create_key()
    body = helpers.chat("one", "long", max_tokens=2000, stream=True)
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, headers=helpers.auth(key), timeout=30) as r:
        assert r.status_code == 200
        seen = 0
        lines = r.iter_lines()  # held: breaking out of the loop must not close the stream
        for line in lines:
            if line.startswith("data: "):
                seen += 1
            if seen >= 3:
                break
        assert fake.stats()["in_flight"] == 1
    wait_until(lambda: fake.stats()["aborted"] == 1, 5, what="the upstream to see the client go")
    assert fake.stats()["in_flight"] == 0
    assert fake.stats()["completed"] == 0
    wait_until(lambda: gw.slots("one", gw_upstream(fake)) == 0, 5, what="slot released after the abort")


def test_stream_relayed_with_usage_accounted(gw: Any, fake: Any, helpers: Any) -> None:
    key = gw.create_key("acct")
    kid = _key_id(gw, key)
    body = helpers.chat("one", "s", max_tokens=4, stream=True)
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, headers=helpers.auth(key), timeout=30) as r:
        payloads = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    # the gateway asked for usage to count tokens; the client did not, so it does not see that chunk
    assert all(c["choices"] for c in chunks)
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks) == "t0 t1 t2 t3 "

    def usage() -> dict[str, Any]:
        u: dict[str, Any] = httpx.get(
            f"{gw.url}/admin/keys/{kid}/usage", headers=helpers.auth(helpers.ADMIN_KEY), timeout=5
        ).json()
        return u

    wait_until(lambda: usage()["completion_tokens"] == 4, 5, what="usage accounted")
    assert usage()["prompt_tokens"] == 5
    assert usage()["requests"] == 1


def _key_id(gw: Any, secret: str) -> str:
    import hashlib

    return hashlib.sha256(secret.encode()).hexdigest()[:12]


def test_first_token_timeout(gw: Any, fake: Any, helpers: Any) -> None:
    key = gw.create_key()
    fake.hold(True)
    t0 = time.monotonic()
    r = httpx.post(
        gw.url + "/v1/chat/completions", json=helpers.chat("quick", stream=True), headers=helpers.auth(key), timeout=10
    )
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "first_token_timeout"
    assert time.monotonic() - t0 < 3
    fake.hold(False)
    wait_until(lambda: gw.slots("quick", gw_upstream(fake)) == 0, 5, what="slot released after the timeout")
