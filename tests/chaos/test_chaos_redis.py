"""Redis restarted (with its append-only file, and empty) and frozen under load: 503 with
Retry-After while it is away, serving again after, API keys kept when Redis persists, and never
more requests in the engine than the gateway's slots: running streams are counted again."""

from __future__ import annotations

import signal
import time

import psutil
import redis

from genmesh.gateway.redis.keys import KeySpace
from support.chaos import (
    SLOTS,
    Chaos,
    Load,
    load,
    new_key,
    others_untouched,
    record,
    serves,
    until_serving,
)
from support.polling import until
from support.servers import MODEL_NAME

RUNNING = SLOTS - 2  # long streams across the fault; two slots stay free for probes


async def _first_503(ld: Load, chaos: Chaos, t0: float) -> float:
    """Probe until the gateway answers 503 (with Retry-After) while Redis is away; seconds after t0."""

    async def refused() -> bool:
        r = await serves(ld.client, chaos.gateway, chaos.auth)
        if r.status_code != 503:
            return False
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["code"] == "queue_store_unavailable"
        return True

    return await until(refused, t0 + 30 - time.monotonic(), "a 503 while Redis is away", every_s=0) - t0


async def _no_over_admission(ld: Load, chaos: Chaos, name: str) -> None:
    """Four more streams after the fault: two take the free slots, two must wait in the queue."""
    queue = KeySpace().model(MODEL_NAME, []).queue
    store = redis.Redis.from_url(chaos.mesh.redis_url, socket_timeout=5)
    ld.add(chaos.gateway, 4, chaos.auth)
    await until(lambda: store.zcard(queue) == 2, 30, "two requests to wait for a slot")
    await until(lambda: ld.gauge.last == SLOTS, 30, "the engine to hold every slot")
    assert record(name, "engine in-flight peak (gauge)", ld.gauge.peak, f"<= {SLOTS}") <= SLOTS


async def _kill_redis(chaos: Chaos, *, lose_data: bool) -> float:
    chaos.mesh.process("redis").kill()
    t0 = time.monotonic()
    if lose_data:  # before the launcher restarts it (1 s back-off): it comes back empty
        for path in chaos.redis_dir.iterdir():
            path.rename(chaos.redis_dir.parent / f"{path.name}.lost-{time.time_ns()}")
    return t0


async def test_redis_restart_keeps_keys_and_capacity(chaos: Chaos) -> None:
    name = "Redis kill -9 (AOF)"
    before = chaos.mesh.pids()
    async with load(chaos.engine) as ld:
        await ld.fill(chaos.gateway, RUNNING, chaos.auth)
        t0 = await _kill_redis(chaos, lose_data=False)
        fail_s = await _first_503(ld, chaos, t0)
        serving = await until_serving(ld.client, chaos.gateway, chaos.auth, 60)  # with the same key: it was kept
        await _no_over_admission(ld, chaos, name)
    others_untouched(before, chaos.mesh.pids(), "redis")
    assert record(name, "first 503 + Retry-After (s)", fail_s, "<= 6") <= 6
    assert record(name, "serving again, same API key (s)", serving - t0, "<= 30") <= 30


async def test_redis_restart_empty_re_registers_running_streams(chaos: Chaos) -> None:
    name = "Redis kill -9, data lost"
    async with load(chaos.engine) as ld:
        await ld.fill(chaos.gateway, RUNNING, chaos.auth)
        t0 = await _kill_redis(chaos, lose_data=True)
        old = chaos.auth
        chaos.key = await new_key(ld.client, chaos.gateway)  # every key went with the data
        serving = await until_serving(ld.client, chaos.gateway, chaos.auth, 60)
        assert (await serves(ld.client, chaos.gateway, old)).status_code == 401  # the data really went
        await _no_over_admission(ld, chaos, name)
    assert record(name, "serving again (new API key) (s)", serving - t0, "<= 30") <= 30


async def test_redis_freeze(chaos: Chaos) -> None:
    name = "Redis SIGSTOP"
    redis_proc: psutil.Process = chaos.mesh.process("redis")
    async with load(chaos.engine) as ld:
        await ld.fill(chaos.gateway, RUNNING, chaos.auth)
        redis_proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            fail_s = await _first_503(ld, chaos, t0)
        finally:
            redis_proc.send_signal(signal.SIGCONT)
        t1 = time.monotonic()
        serving = await until_serving(ld.client, chaos.gateway, chaos.auth, 60)
        await _no_over_admission(ld, chaos, name)
    assert record(name, "first 503 + Retry-After (s)", fail_s, "<= 6") <= 6
    assert record(name, "serving again after SIGCONT (s)", serving - t1, "<= 5") <= 5
