"""Several gateway processes on one Redis: exact concurrency, dead-gateway reclaim, Redis restart, retries."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any

import httpx

from support.polling import until, wait_until
from support.servers import free_port


def _models(helpers: Any, fake: Any, **limits: Any) -> dict[str, Any]:
    return {"m": helpers.model_config(fake.url, **limits)}


async def _stream(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[int, list[str]]:
    async with client.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
        payloads = [line[6:] async for line in r.aiter_lines() if line.startswith("data: ")]
        return r.status_code, payloads


async def test_two_gateways_never_exceed_upstream_concurrency(
    start_gateway: Any, fake: Any, helpers: Any, redis_server: Any
) -> None:
    models = _models(helpers, fake, max_concurrency=4, max_queue_length=100, max_queue_wait_s=30)
    a = start_gateway(models)
    b = start_gateway(models)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=100)) as client:
        bodies = [helpers.chat("m", f"r{i}", max_tokens=5, stream=True) for i in range(40)]
        results = await asyncio.gather(*(_stream(client, (a, b)[i % 2].url, body) for i, body in enumerate(bodies)))
    assert all(status == 200 for status, _ in results)
    assert all(payloads[-1] == "[DONE]" and len(payloads) == 6 for _, payloads in results)
    stats = fake.stats()
    assert stats["total"] == 40
    assert stats["completed"] == 40
    assert stats["max_in_flight"] <= 4
    assert stats["max_in_flight"] == 4  # the limit is also reached, not merely respected


async def test_killed_gateway_slots_come_back_within_lease_time(
    start_gateway: Any, fake: Any, helpers: Any, redis_server: Any
) -> None:
    models = _models(helpers, fake, max_concurrency=4, max_queue_length=10, max_queue_wait_s=30)
    doomed = start_gateway(models)
    survivor = start_gateway(models)
    fake.hold(True)
    async with httpx.AsyncClient() as client:
        held = [
            asyncio.create_task(_stream(client, doomed.url, helpers.chat("m", f"d{i}", stream=True))) for i in range(4)
        ]
        await until(lambda: fake.stats()["in_flight"] == 4, 10, "4 requests to hold the slots")
        waiter = asyncio.create_task(_stream(client, survivor.url, helpers.chat("m", "survivor", stream=True)))
        queue = helpers.KeySpace().model("m", []).queue
        await until(lambda: redis_server.client().zcard(queue) == 1, 10, "the survivor's request to queue")
        os.kill(doomed.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        fake.hold(False)
        status, payloads = await waiter
        waited = time.monotonic() - killed_at
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)
    assert status == 200
    assert payloads[-1] == "[DONE]"
    assert "survivor" in fake.stats()["order"]
    lease = helpers.LEASE_TTL_S
    assert waited < lease + 1.5, f"slot came back after {waited:.2f}s (lease {lease}s)"


def test_redis_restart_recovers_without_gateway_restart(
    start_gateway: Any, fake: Any, helpers: Any, redis_server: Any, tmp_path: Any
) -> None:
    own = helpers.RedisServer(free_port(), tmp_path)
    own.start()
    try:
        gw = start_gateway(_models(helpers, fake, max_concurrency=2), "--redis-timeout-s", "1", redis_url=own.url)
        body = helpers.chat("m", "before")
        assert httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=10).status_code == 200
        own.stop()
        t0 = time.monotonic()
        down = httpx.post(gw.url + "/v1/chat/completions", json=helpers.chat("m", "down"), timeout=10)
        assert down.status_code == 503
        assert down.json()["error"]["code"] == "queue_store_unavailable"
        assert "retry-after" in down.headers
        assert time.monotonic() - t0 < 3, "a Redis outage must fail fast, not hang"
        not_ready = httpx.get(gw.url + "/ready", timeout=10)
        assert not_ready.status_code == 503
        assert not_ready.headers["retry-after"] == "1"
        own.start()

        def serves() -> bool:
            r = httpx.post(gw.url + "/v1/chat/completions", json=helpers.chat("m", "after"), timeout=10)
            return r.status_code == 200

        wait_until(serves, 15, interval_s=0.2, what="the gateway to serve again once Redis is back")
        wait_until(lambda: httpx.get(gw.url + "/ready", timeout=5).status_code == 200, 10, what="ready again")
    finally:
        own.stop()


def test_connect_failure_is_retried_on_another_upstream(start_gateway: Any, fake: Any, helpers: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    ups = [{"url": dead, "max_concurrency": 8, "name": "dead"}, {"url": fake.url, "max_concurrency": 1, "name": "live"}]
    # health probes every 60 s: the dead upstream is still offered when the request comes
    gw = start_gateway({"m": {"upstreams": ups}}, "--health-interval-s", "60")
    r = httpx.post(gw.url + "/v1/chat/completions", json=helpers.chat("m", "retry"), timeout=20)
    assert r.status_code == 200, r.text
    assert r.headers["x-upstream"] == "live"
    assert fake.stats()["order"] == ["retry"]
    metrics = httpx.get(gw.url + "/metrics", timeout=5).text
    assert 'genmesh_gateway_upstream_retries_total{model="m"} 1.0' in metrics


def test_metrics_and_request_id(start_gateway: Any, fake: Any, helpers: Any) -> None:
    gw = start_gateway(_models(helpers, fake, max_concurrency=2))
    r = httpx.post(
        gw.url + "/v1/chat/completions", json=helpers.chat("m"), headers={"X-Request-ID": "rid-123"}, timeout=10
    )
    assert r.status_code == 200
    assert r.headers["x-request-id"] == "rid-123"
    assert r.headers["x-queue-position"] == "0"
    assert int(r.headers["x-queue-wait-ms"]) >= 0
    text = httpx.get(gw.url + "/metrics", timeout=5).text
    for needle in (
        'genmesh_gateway_requests_total{model="m",status="200"} 1.0',
        'genmesh_gateway_queue_wait_seconds_count{model="m",priority="5"} 1.0',
        'genmesh_gateway_queue_depth{model="m",priority="5"} 0.0',
        'genmesh_gateway_tokens_total{kind="completion",tenant="anonymous"} 3.0',
        "genmesh_gateway_upstream_in_flight{",
    ):
        assert needle in text, needle
    models = httpx.get(gw.url + "/v1/models", timeout=5).json()
    assert [m["id"] for m in models["data"]] == ["m"]
    assert json.loads(httpx.get(gw.url + "/health", timeout=5).text)["status"] == "ok"
