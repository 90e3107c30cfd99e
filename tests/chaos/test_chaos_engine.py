"""The engine under load: its core SIGKILLed, its core SIGSTOPped (hung), its API process killed."""

from __future__ import annotations

import signal
import time

import psutil
import pytest

from support.chaos import SHORT, SLOTS, WATCHDOG_S, Chaos, load, others_untouched, record, until_serving
from support.polling import until


async def test_engine_core_sigkill_under_load(chaos: Chaos) -> None:
    name = f"core SIGKILL ({SLOTS} streams)"
    async with load(chaos.engine) as ld:
        await ld.fill(chaos.gateway, SLOTS, chaos.auth)
        core = chaos.mesh.engine_core()
        api_pid = chaos.mesh.process("engine").pid
        core.kill()
        t0 = time.monotonic()

        async def restarting() -> bool:
            return (await ld.client.get(chaos.engine + "/health")).json()["status"] == "restarting"

        said = await until(restarting, 5, "the engine to say it is restarting its core", every_s=0.005)
        # while the new core starts, every hop answers 503 with Retry-After
        for hop, headers in ((chaos.engine, {}), (chaos.microservice, {}), (chaos.gateway, chaos.auth)):
            r = await ld.client.post(hop + "/v1/chat/completions", json=SHORT, headers=headers, timeout=10)
            assert r.status_code == 503, (hop, r.text)
            assert int(r.headers["retry-after"]) >= 1, hop
            if hop == chaos.engine:
                assert r.json()["error"]["code"] == "engine_restarting"
        results = await ld.results()
        assert all(r.error is not None and r.error_at is not None for r in results), results
        errors_s = max(r.error_at for r in results if r.error_at is not None) - t0
        serving = await until_serving(ld.client, chaos.gateway, chaos.auth, 60)
        peak = ld.gauge.peak
    assert not any(r.hung for r in results)
    record(name, "engine says 'restarting' (503 for new requests) (s)", said - t0)
    assert record(name, "in-flight streams ended with an error event (s)", errors_s, "<= 1") <= 1.0
    assert record(name, "mesh serving again (s)", serving - t0, "<= 30") <= 30
    assert record(name, "engine in-flight peak (gauge)", peak, f"<= {SLOTS}") <= SLOTS
    assert chaos.mesh.process("engine").pid == api_pid, "the API process replaced its core itself"


async def test_engine_core_sigstop_hang_under_load(chaos: Chaos) -> None:
    name = f"core SIGSTOP (watchdog {WATCHDOG_S:g} s)"
    n = max(2, SLOTS // 2)
    async with load(chaos.engine) as ld:
        await ld.fill(chaos.gateway, n, chaos.auth)
        core = chaos.mesh.engine_core()
        try:
            core.send_signal(signal.SIGSTOP)
            t0 = time.monotonic()
            results = await ld.results()
            serving = await until_serving(ld.client, chaos.gateway, chaos.auth, 90)
        finally:
            if core.is_running() and core.status() != psutil.STATUS_ZOMBIE:
                core.kill()  # the watchdog did not: leave no stopped process behind
        peak = ld.gauge.peak
    assert all(r.error is not None and "hung" in r.error["message"] for r in results), results
    detected = max(r.error_at for r in results if r.error_at is not None) - t0
    assert not any(r.hung for r in results)
    assert record(name, "stuck streams ended with an error event (s)", detected, f"~{WATCHDOG_S:g}+1") <= WATCHDOG_S + 5
    assert record(name, "hung core replaced, mesh serving (s)", serving - t0, "<= 60") <= 60
    assert record(name, "engine in-flight peak (gauge)", peak, f"<= {SLOTS}") <= SLOTS


@pytest.mark.chaos_full
async def test_engine_api_process_kill(chaos: Chaos) -> None:
    name = "engine API kill -9"
    before = chaos.mesh.pids()
    core = chaos.mesh.engine_core()
    async with load(chaos.engine) as ld:
        chaos.mesh.process("engine").kill()
        t0 = time.monotonic()
        await until(lambda: not core.is_running() or core.status() == psutil.STATUS_ZOMBIE, 10, "the orphaned core")
        serving = await until_serving(ld.client, chaos.gateway, chaos.auth, 120)
    others_untouched(before, chaos.mesh.pids(), "engine")
    assert record(name, "launcher restarted it, mesh serving (s)", serving - t0, "<= 30") <= 30
