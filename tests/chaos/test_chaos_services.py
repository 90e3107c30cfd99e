"""A service process of the mesh killed mid-stream: the gateway, the microservice. The launcher
restarts it; the others are never stopped."""

from __future__ import annotations

import time

from support.chaos import SHORT, SLOTS, Chaos, load, others_untouched, record, until_serving
from support.polling import until


async def test_gateway_kill_mid_stream(chaos: Chaos) -> None:
    name = "gateway kill -9"
    before = chaos.mesh.pids()
    async with load(chaos.engine) as ld:
        await ld.fill(chaos.gateway, SLOTS, chaos.auth)
        chaos.mesh.process("gateway").kill()
        t0 = time.monotonic()
        results = await ld.results()
        freed = await until(lambda: ld.gauge.last == 0, 30, "the engine to abort the orphaned streams")

        async def gateway_up() -> bool:
            try:
                return (await ld.client.get(chaos.gateway + "/health", timeout=2)).status_code == 200
            except Exception:
                return False

        back = await until(gateway_up, 60, "the gateway to be restarted", every_s=0.1)
        # its dead predecessor's leases block the slots until their TTL (10 s) ends
        serving = await until_serving(ld.client, chaos.gateway, chaos.auth, 60)
        peak = ld.gauge.peak
    assert all(r.failure is not None and not r.done and not r.hung for r in results), results
    others_untouched(before, chaos.mesh.pids(), "gateway")
    record(name, "clients' streams cut (s)", max(r.ended for r in results) - t0)
    record(name, "engine aborted the orphaned streams (s)", freed - t0, "")
    record(name, "gateway restarted by the launcher (s)", back - t0)
    assert record(name, "mesh serving again (leases reclaimed) (s)", serving - t0, "<= 30") <= 30
    assert record(name, "engine in-flight peak (gauge)", peak, f"<= {SLOTS}") <= SLOTS


async def test_microservice_kill_mid_stream(chaos: Chaos) -> None:
    name = "microservice kill -9"
    before = chaos.mesh.pids()
    async with load(chaos.engine) as ld:
        await ld.fill(chaos.gateway, SLOTS, chaos.auth)
        chaos.mesh.process("microservice").kill()
        t0 = time.monotonic()
        down = await ld.client.post(chaos.gateway + "/v1/chat/completions", json=SHORT, headers=chaos.auth)
        results = await ld.results()
        freed = await until(lambda: ld.gauge.last == 0, 30, "the engine to abort the orphaned streams")
        serving = await until_serving(ld.client, chaos.gateway, chaos.auth, 60)
        peak = ld.gauge.peak
    assert down.status_code in (502, 503), down.text
    assert int(down.headers["retry-after"]) >= 1
    # the gateway ends each broken stream with an error event, never a bare cut
    assert all(r.error is not None and r.done and not r.hung for r in results), results
    others_untouched(before, chaos.mesh.pids(), "microservice")
    errors_s = max(r.error_at for r in results if r.error_at is not None) - t0
    assert record(name, "in-flight streams ended with an error event (s)", errors_s, "<= 1") <= 1
    record(name, "engine aborted the orphaned streams (s)", freed - t0)
    assert record(name, "mesh serving again (s)", serving - t0, "<= 30") <= 30
    assert record(name, "engine in-flight peak (gauge)", peak, f"<= {SLOTS}") <= SLOTS
