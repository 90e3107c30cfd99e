"""Recovery: exact capacity across a Redis restart (one gateway, and two), an upstream that accepts
streams but sends nothing gets its circuit opened, and every 503 the gateway relays has Retry-After."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.polling import until
from support.servers import free_port, metric_value


@pytest.fixture
def own_redis(helpers: Any, tmp_path: Path) -> Iterator[Any]:
    """A Redis of the test's own, restarted empty (no persistence) when the test says."""
    server = helpers.RedisServer(free_port(), tmp_path)
    server.start()
    yield server
    server.stop()


async def _stream(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> int:
    async with client.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
        async for _ in r.aiter_bytes():
            pass
        return r.status_code


async def _across_a_restart(gateways: list[Any], fake: Any, helpers: Any, redis: Any) -> list[int]:
    """One long stream through the last gateway, Redis restarted empty, then 4 requests through the first."""
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=20)) as client:
        long = asyncio.create_task(_stream(client, gateways[-1].url, helpers.chat("m", "long", 300, stream=True)))
        await until(lambda: fake.stats()["in_flight"] == 1, 10, "the long stream to start")
        redis.stop()
        redis.start()
        burst = [_stream(client, gateways[0].url, helpers.chat("m", f"b{i}", 20, stream=True)) for i in range(4)]
        statuses = await asyncio.gather(*burst)
        statuses.append(await long)
    return statuses


async def test_a_redis_restart_does_not_over_admit(start_gateway: Any, fake: Any, helpers: Any, own_redis: Any) -> None:
    models = {"m": helpers.model_config(fake.url, max_concurrency=2, max_queue_length=50, max_queue_wait_s=30)}
    gw = start_gateway(models, "--redis-timeout-s", "1", redis_url=own_redis.url)
    statuses = await _across_a_restart([gw], fake, helpers, own_redis)
    assert statuses == [200] * 5
    # the running stream's lease was re-created before anything else was admitted: never 3 at once
    assert fake.stats()["max_in_flight"] == 2
    assert fake.stats()["completed"] == 5


async def test_a_redis_restart_waits_for_other_gateways_to_re_register(
    start_gateway: Any, fake: Any, helpers: Any, own_redis: Any
) -> None:
    models = {"m": helpers.model_config(fake.url, max_concurrency=2, max_queue_length=50, max_queue_wait_s=30)}
    a = start_gateway(models, "--redis-timeout-s", "1", redis_url=own_redis.url)
    b = start_gateway(models, "--redis-timeout-s", "1", redis_url=own_redis.url)
    queue = helpers.KeySpace().model("m", []).queue
    async with httpx.AsyncClient() as client:
        long = asyncio.create_task(_stream(client, b.url, helpers.chat("m", "long", 300, stream=True)))
        # gateway A has seen, at a renewal, that B runs a request of model m
        await until(lambda: metric_value(a.url, "genmesh_gateway_peers") == 1, 10, "A to see B")
        b.proc.send_signal(signal.SIGSTOP)  # B cannot re-register its lease until it is let go
        try:
            own_redis.stop()
            own_redis.start()
            bodies = [helpers.chat("m", f"b{i}", 20, stream=True) for i in range(4)]
            burst = [asyncio.create_task(_stream(client, a.url, body)) for body in bodies]
            # A holds its grants (half a lease time) instead of handing out B's slot
            await until(lambda: own_redis.client().zcard(queue) == 4, 10, "A's requests to wait")
        finally:
            b.proc.send_signal(signal.SIGCONT)
        statuses = [*await asyncio.gather(*burst), await long]
    assert statuses == [200] * 5
    assert fake.stats()["max_in_flight"] == 2  # B re-registered within the hold: never 3 at once


async def test_an_upstream_that_sends_nothing_has_its_circuit_opened(
    start_gateway: Any, fake: Any, helpers: Any
) -> None:
    models = {"m": helpers.model_config(fake.url, max_concurrency=4, retry_after_s=2)}
    gw = start_gateway(models, "--progress-timeout-s", "1")
    fake.hold(True)  # requests are accepted and then nothing comes back
    async with httpx.AsyncClient() as client:
        held = asyncio.create_task(_stream(client, gw.url, helpers.chat("m", "held", 3, stream=True)))
        await until(lambda: fake.stats()["in_flight"] == 1, 10, "the request to reach the upstream")
        up = f'genmesh_gateway_upstream_available{{model="m",upstream="{helpers.upstream_name(fake.url)}"}}'
        await until(lambda: up + " 0.0" in httpx.get(gw.url + "/metrics").text, 10, "the circuit to open")
        r = await client.post(gw.url + "/v1/chat/completions", json=helpers.chat("m", "refused"), timeout=10)
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "no_healthy_upstream"
        assert 1 <= int(r.headers["retry-after"]) <= 5  # when the cool-down (5 s) ends: the next probe
        fake.hold(False)
        assert await held == 200
        await until(lambda: httpx.get(gw.url + "/ready").status_code == 200, 10, "the circuit to close again")
        after = await client.post(gw.url + "/v1/chat/completions", json=helpers.chat("m", "after"), timeout=10)
        assert after.status_code == 200


def test_relayed_503_gets_retry_after(start_gateway: Any, fake: Any, helpers: Any) -> None:
    gw = start_gateway({"m": helpers.model_config(fake.url, retry_after_s=4)})
    fake.control(fail_status=503)
    r = httpx.post(gw.url + "/v1/chat/completions", json=helpers.chat("m"), timeout=10)
    assert r.status_code == 503
    assert r.headers["retry-after"] == "4"
    fake.control(fail_status=429)
    r = httpx.post(gw.url + "/v1/chat/completions", json=helpers.chat("m"), timeout=10)
    assert r.status_code == 429
    assert r.headers["retry-after"] == "4"


def _redis_errors(url: str, headers: dict[str, str]) -> float:
    """The gateway's failed Redis calls so far (the series appears at the first one)."""
    page = httpx.get(url + "/metrics", headers=headers, timeout=5)
    assert page.status_code == 200, page.text
    lines = page.text.splitlines()
    samples = [float(line.split()[1]) for line in lines if line.startswith("genmesh_gateway_redis_errors_total ")]
    return samples[0] if samples else 0.0


def test_admin_endpoints_answer_503_with_retry_after_while_redis_is_away(
    start_gateway: Any, fake: Any, helpers: Any, own_redis: Any
) -> None:
    models = {"m": helpers.model_config(fake.url)}
    gw = start_gateway(models, "--auth", "on", "--redis-timeout-s", "1", redis_url=own_redis.url)
    admin = helpers.auth(helpers.ADMIN_KEY)
    errors_before = _redis_errors(gw.url, admin)
    own_redis.stop()
    calls = [
        ("POST", "/admin/keys", {"tenant": "t"}),
        ("GET", "/admin/keys", None),
        ("DELETE", "/admin/keys/k1", None),
        ("GET", "/admin/keys/k1/usage", None),
    ]
    for method, path, body in calls:
        r = httpx.request(method, gw.url + path, json=body, headers=admin, timeout=10)
        assert r.status_code == 503, (path, r.status_code, r.text)
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["code"] == "queue_store_unavailable"
    assert _redis_errors(gw.url, admin) >= errors_before + len(calls)  # counted, as on the request path
    own_redis.start()
    made = httpx.post(gw.url + "/admin/keys", json={"tenant": "t"}, headers=admin, timeout=10)
    assert made.status_code == 201  # the same gateway, once Redis is back


async def test_a_frozen_redis_is_every_request_s_503_within_the_redis_timeout(
    start_gateway: Any, fake: Any, helpers: Any, own_redis: Any
) -> None:
    """Redis SIGSTOPped (the test's own): each request's admission (key, limits, slot) has the
    Redis timeout in all, so every one of a burst gets its 503 within it, not one timeout per call."""
    timeout_s = 1.0
    models = {"m": helpers.model_config(fake.url, max_concurrency=4)}
    gw = start_gateway(models, "--redis-timeout-s", str(timeout_s), redis_url=own_redis.url)
    async with httpx.AsyncClient() as client:
        url = gw.url + "/v1/chat/completions"
        assert (await client.post(url, json=helpers.chat("m", "warm"), timeout=10)).status_code == 200

        async def timed(i: int) -> tuple[httpx.Response, float]:
            began = asyncio.get_running_loop().time()
            r = await client.post(url, json=helpers.chat("m", f"frozen {i}", stream=i % 2 == 0), timeout=30)
            return r, asyncio.get_running_loop().time() - began

        own_redis.proc.send_signal(signal.SIGSTOP)
        try:
            results = await asyncio.gather(*(timed(i) for i in range(3)))
        finally:
            own_redis.proc.send_signal(signal.SIGCONT)
        for r, took in results:
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "queue_store_unavailable"
            assert int(r.headers["retry-after"]) >= 1
            assert took <= timeout_s + 1.0, took  # one budget, not one per Redis call (was 2-3 x)
        r = await client.post(url, json=helpers.chat("m", "thawed"), timeout=30)
        assert r.status_code == 200, r.text


async def test_an_open_circuit_closes_as_soon_as_the_upstream_is_healthy_again(
    start_gateway: Any, fake: Any, helpers: Any
) -> None:
    """Past its cool-down an open circuit is probed every circuit_probe_interval_s, and a failed probe
    does not start the cool-down again: the upstream is offered again within a fraction of a second
    of its health check saying 200 (health_interval_s is long here: the half-open probes do it).
    While no upstream of the model is healthy, the gateway's readiness says so."""
    models = {"m": helpers.model_config(fake.url, max_concurrency=2)}
    flags = ("--circuit-cooldown-s", "1", "--circuit-probe-interval-s", "0.2", "--health-interval-s", "30")
    gw = start_gateway(models, *flags)
    fake.control(fail_status=503, health_status=503)
    async with httpx.AsyncClient() as client:
        url = gw.url + "/v1/chat/completions"

        async def refused() -> bool:
            r = await client.post(url, json=helpers.chat("m", "down"), timeout=10)
            assert r.status_code == 503, r.text
            return r.json()["error"].get("code") == "no_healthy_upstream"

        await until(refused, 10, "the circuit to open")
        ready = await client.get(gw.url + "/ready", timeout=5)
        assert ready.status_code == 503
        assert ready.json()["no_healthy_upstream"] == ["m"]
        # half-open: probed again and again (each probe fails), never waiting a whole cool-down
        checks = fake.stats()["health_checks"]
        await until(lambda: fake.stats()["health_checks"] >= checks + 5, 10, "half-open probes")
        assert (await client.get(gw.url + "/ready", timeout=5)).status_code == 503
        fake.control(fail_status=0, health_status=200)
        healthy = asyncio.get_running_loop().time()

        async def ready_again() -> bool:
            return (await client.get(gw.url + "/ready", timeout=5)).status_code == 200

        await until(ready_again, 10, "the circuit to close", every_s=0.02)
        lag_s = asyncio.get_running_loop().time() - healthy
        assert lag_s < 1.0, lag_s  # was up to a cool-down plus a health interval
        assert (await client.get(gw.url + "/ready", timeout=5)).json()["no_healthy_upstream"] == []
        r = await client.post(url, json=helpers.chat("m", "back", stream=True), timeout=10)
        assert r.status_code == 200, r.text
