"""A new stream right after the engine's core came back (issue 45): the gateway killed and restarted,
then the engine's core SIGKILLed under a stream through it, then -- the moment the engine's
``/health`` is 200 again -- a new long stream through the gateway. It must be served: before the
fix it was refused with ``503 no_healthy_upstream`` whenever it came before the gateway's next
half-open probe (the dead window's failed probes had opened the circuit); now a request that finds
no upstream probes it itself.

``make chaos`` runs the sequence ten times in a row; the fast form in ``make test`` runs it once
(each run waits out a core restart: ~25 s on an idle 2-core CPU, a minute and more under load)."""

from __future__ import annotations

import httpx
import pytest

from support.chaos import FULL, Chaos, StreamResult, load, long_body, record, settled, stream_once, until_serving
from support.polling import until

RUNS = 10 if FULL else 1


async def _health(client: httpx.AsyncClient, url: str) -> int:
    try:
        return (await client.get(url + "/health", timeout=2)).status_code
    except httpx.HTTPError:
        return 599


async def _ok(client: httpx.AsyncClient, url: str) -> bool:
    return await _health(client, url) == 200


async def _not_ok(client: httpx.AsyncClient, url: str) -> bool:
    return await _health(client, url) != 200


@pytest.mark.timeout(max(600, 240 * RUNS))  # each run waits out a core restart (a minute or more under load)
async def test_new_stream_served_right_after_core_recovery(chaos: Chaos) -> None:
    name = "gateway+core kill, new stream"
    runs: list[tuple[float, StreamResult]] = []  # each run's new stream, and its start after /health was 200
    for _ in range(RUNS):
        async with load(chaos.engine) as ld:
            # (1) the gateway killed; the launcher restarts it
            chaos.mesh.process("gateway").kill()
            await until(lambda: _ok(ld.client, chaos.gateway), 60, "the gateway to be restarted", 0.1)
            await until_serving(ld.client, chaos.gateway, chaos.auth, 60)
            # (2) the engine's core SIGKILLed under a long stream through the gateway
            await ld.fill(chaos.gateway, 1, chaos.auth)
            chaos.mesh.engine_core().kill()
            await until(lambda: _not_ok(ld.client, chaos.engine), 10, "the engine's /health to leave 200", 0.005)
            back = await until(lambda: _ok(ld.client, chaos.engine), 180, "the engine's /health to be 200 again")
            # (3) at once: a new long stream through the gateway
            res = await stream_once(ld.client, chaos.gateway, long_body(128), chaos.auth)
            killed = await ld.results()
        assert killed[0].error is not None or killed[0].failure is not None, killed  # the core kill ended it
        runs.append((res.started - back, res))
    if RUNS > 1:  # ten gateway deaths in a row: its back-off is at the cap; the next scenario's kill is a first
        await settled(chaos.mesh, "gateway")
    refused = [(i + 1, after, res) for i, (after, res) in enumerate(runs) if not _served(res)]
    record(name, f"new streams served right after recovery (of {RUNS})", RUNS - len(refused), f"== {RUNS}")
    assert not refused, f"runs refused (run, s after /health was 200, result): {refused}\n{chaos.mesh.output(80)}"


def _served(res: StreamResult) -> bool:
    return res.status == 200 and res.error is None and res.done and res.chunks > 0
