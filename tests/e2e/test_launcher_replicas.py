"""``make run REPLICAS=N``: the native launcher starts N engine + microservice pairs, each engine on its
own share of the cores, and the gateway spreads requests over them."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from support.gateway_helpers import counter
from support.mesh import Mesh, launch, wait_up
from support.servers import MODEL_NAME, ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from launch_mesh import Component, core_shares
from launch_mesh import Mesh as Launcher


def test_core_shares_split_the_cores_or_leave_them_shared() -> None:
    assert core_shares(1, [0, 1]) == [frozenset()]  # one replica: not pinned, all cores
    assert core_shares(2, [0, 1]) == [frozenset({0}), frozenset({1})]  # 2 cores: one each
    assert core_shares(2, [0, 1, 2, 3, 4]) == [frozenset({0, 1}), frozenset({2, 3})]
    assert core_shares(3, [0, 1]) == [frozenset()] * 3  # fewer cores than replicas: shared


def test_an_engine_that_dies_during_start_up_is_named_with_its_reason(tmp_path: Path) -> None:
    """The launcher's message names the replica, its cores, how it exited and the engine's own reason
    (a child that logs as the engine does and exits as its failed start-up does)."""
    died = "engine core process exited: killed by SIGFPE (Floating point exception; exit code -8) while loading"
    record = {"level": "ERROR", "name": "genmesh.engine.client.core_client", "message": died}
    code = f"import json, sys; print(json.dumps({record!r}), flush=True); sys.exit(3)"
    child = Component("engine-2", [sys.executable, "-c", code], "", lambda: False, cpus=frozenset({1}), replica=2)
    launcher = Launcher(tmp_path)
    (tmp_path / "logs").mkdir()
    with pytest.raises(RuntimeError) as err:
        launcher.start(child, timeout_s=60)
    assert str(err.value) == f"engine-2 (replica 2, CPU 1) exited with exit code 3 during start-up: {died}"
    assert died in (tmp_path / "logs" / "engine-2.log").read_text()


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[Mesh]:
    m = launch(tmp_path / "run", "--replicas", "2")
    try:
        wait_up(m, timeout_s=360)
        yield m
    finally:
        m.stop()


def test_two_replicas_serve_behind_one_gateway(mesh: Mesh) -> None:
    config = json.loads((mesh.run_dir / "gateway.yaml").read_text())
    ups = config["models"][MODEL_NAME]["upstreams"]
    ms = mesh.ports["microservice"]
    assert [(u["name"], u["url"]) for u in ups] == [
        ("replica-1", f"http://127.0.0.1:{ms}"),
        ("replica-2", f"http://127.0.0.1:{ms + 1}"),
    ]
    engines = [p for p in psutil.Process(mesh.proc.pid).children() if any("genmesh-engine" in a for a in p.cmdline())]
    assert len(engines) == 2
    cpus = sorted(psutil.Process().cpu_affinity() or [])
    shares = [set(p.cpu_affinity() or []) for p in engines]
    if len(cpus) >= 2:  # each engine on its own cores, with as many inference threads
        assert not shares[0] & shares[1]
        for p, share in zip(engines, shares, strict=True):
            assert json.dumps({"INFERENCE_NUM_THREADS": len(share)}) in p.cmdline()

    async def eight() -> list[httpx.Response]:
        body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": 24}
        async with httpx.AsyncClient(timeout=120) as client:
            url = mesh.url("gateway") + "/v1/chat/completions"
            return list(await asyncio.gather(*(client.post(url, json=body) for _ in range(8))))

    replies = asyncio.run(eight())
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
    served = {r.headers["x-upstream"] for r in replies}
    assert served == {"replica-1", "replica-2"}  # least-loaded: eight at once go to both
    metrics = httpx.get(mesh.url("gateway") + "/metrics", timeout=5).text
    name = "genmesh_gateway_upstream_requests_total"
    per = [counter(metrics, name, model=MODEL_NAME, upstream=u["name"]) for u in ups]
    assert sum(per) == 8
    assert min(per) >= 1
    # the second replica's microservice answers on its own port, in front of its own engine
    r = httpx.get(f"http://127.0.0.1:{ms + 1}/v1/ready", timeout=10)
    assert r.status_code == 200
