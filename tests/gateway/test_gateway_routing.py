"""Routing policies through real gateway processes on a real Redis: ``X-Upstream``, requests per
upstream, ``routing: prefix-affinity`` (agreement across replicas, spread, imbalance guard, TTLs).

The two upstreams here are the test double ``tests/support/fake_upstream.py`` (two processes):
these tests check routing mechanics, which need upstreams that can be held and counted. Routing
through two real engines is tested in ``tests/e2e/test_replicas.py``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pydantic import ValidationError

from genmesh.gateway.routing.affinity import block_hashes, prompt_bytes
from genmesh.gateway.routing.config import load_config
from support.gateway_helpers import Fake, counter
from support.polling import until
from support.servers import Server, free_port, start_server, wait_until

PREFIX_TTL_S = 30.0


@pytest.fixture(scope="module")
def second_fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fake]:
    """A second instance of the fake upstream (test double), for two-upstream routing."""
    port = free_port()
    argv = [sys.executable, str(Path(__file__).parents[1] / "support" / "fake_upstream.py"), "--port", str(port)]
    server: Server = start_server("fake-upstream-b", argv, port, tmp_path_factory.mktemp("fake-b"), timeout_s=30)
    fake = Fake(server.url)
    yield fake
    server.stop()


@pytest.fixture
def fakes(fake: Fake, second_fake: Fake) -> Iterator[dict[str, Fake]]:
    second_fake.control(hold=False, delay_ms=20, fail_status=0, reset=True)
    yield {"a": fake, "b": second_fake}
    second_fake.control(hold=False, delay_ms=20, fail_status=0)


def _route(fakes: dict[str, Fake], **keys: Any) -> dict[str, Any]:
    ups = [{"url": f.url, "name": name, "max_concurrency": 8} for name, f in fakes.items()]
    return {"m": {"upstreams": ups, **keys}}


def _body(prefix: str, suffix: str, stream: bool = False) -> dict[str, Any]:
    messages = [{"role": "system", "content": prefix}, {"role": "user", "content": suffix}]
    return {"model": "m", "messages": messages, "max_tokens": 2, "stream": stream}


def _system_prompt(i: int) -> str:
    return f"You are assistant number {i}. " + "Answer briefly and precisely, citing sources. " * 8


def test_routing_key_is_validated_with_a_clear_error(tmp_path: Path) -> None:
    bad = {"models": {"m": {"upstreams": [{"url": "http://127.0.0.1:1"}], "routing": "round-robin"}}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(ValidationError, match="routing"):
        load_config(path)
    proc = subprocess.run(
        [sys.executable, "-m", "genmesh.gateway", "--config", str(path), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "routing" in proc.stderr
    assert "'least-loaded' or 'prefix-affinity'" in proc.stderr
    good = {"models": {"m": {"upstreams": [{"url": "http://127.0.0.1:1"}]}}}
    path.write_text(yaml.safe_dump(good))
    assert load_config(path).models["m"].routing == "least-loaded"  # the default


def test_block_hashes_name_whole_prefixes() -> None:
    a = prompt_bytes(_body(_system_prompt(1), "first question"))
    b = prompt_bytes(_body(_system_prompt(1), "another question entirely"))
    ha, hb = block_hashes(a, 64, 16), block_hashes(b, 64, 16)
    assert len(ha) == min(len(a) // 64, 16)
    assert len(ha) >= 4
    shared = len(_system_prompt(1)) // 64  # blocks wholly inside the common system prompt
    assert ha[:shared] == hb[:shared]
    assert ha[-1] != hb[-1]
    assert block_hashes(b"x" * 63, 64, 16) == ()  # only whole blocks count


def test_x_upstream_and_requests_per_upstream(start_gateway: Any, fakes: dict[str, Fake]) -> None:
    gw = start_gateway(_route(fakes))
    for f in fakes.values():
        f.hold(True)

    async def two_at_once() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            sent = [
                asyncio.create_task(client.post(gw.url + "/v1/chat/completions", json=_body("p", str(i))))
                for i in range(2)
            ]
            await until(lambda: sum(f.stats()["in_flight"] for f in fakes.values()) >= 2, 10, "both at the upstreams")
            for f in fakes.values():
                f.hold(False)
            return list(await asyncio.gather(*sent))

    unary = asyncio.run(two_at_once())
    assert sorted(r.headers["x-upstream"] for r in unary) == ["a", "b"]  # least-loaded: one each
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=_body("p", "s", stream=True), timeout=30) as r:
        assert r.headers["x-upstream"] in ("a", "b")
        assert r.headers["content-type"].startswith("text/event-stream")
        streamed_on = r.headers["x-upstream"]
        r.read()
    metrics = httpx.get(gw.url + "/metrics", timeout=5).text
    counts = {n: counter(metrics, "genmesh_gateway_upstream_requests_total", model="m", upstream=n) for n in "ab"}
    assert counts == {"a": 1.0 + (streamed_on == "a"), "b": 1.0 + (streamed_on == "b")}
    assert {n: f.stats()["total"] for n, f in fakes.items()} == {n: int(c) for n, c in counts.items()}


def test_prefix_affinity_agrees_across_replicas_and_spreads_prefixes(
    start_gateway: Any, fakes: dict[str, Fake], redis_server: Any
) -> None:
    models = _route(fakes, routing="prefix-affinity", affinity_ttl_s=PREFIX_TTL_S)
    replicas = [start_gateway(models), start_gateway(models)]
    served: dict[int, set[str]] = {}
    for i in range(8):
        for j in range(4):  # each prompt of a group through either replica, with its own question
            gw = replicas[j % 2]
            r = httpx.post(gw.url + "/v1/chat/completions", json=_body(_system_prompt(i), f"question {j}"), timeout=30)
            assert r.status_code == 200, r.text
            served.setdefault(i, set()).add(r.headers["x-upstream"])
    assert all(len(ups) == 1 for ups in served.values()), served  # one upstream per shared prefix
    assert {next(iter(ups)) for ups in served.values()} == {"a", "b"}, served  # prefixes spread over both
    metrics = [httpx.get(gw.url + "/metrics", timeout=5).text for gw in replicas]
    hits = sum(counter(m, "genmesh_gateway_affinity_total", model="m", result="hit") for m in metrics)
    misses = sum(counter(m, "genmesh_gateway_affinity_total", model="m", result="miss") for m in metrics)
    assert (hits, misses) == (24.0, 8.0)
    client = redis_server.client()
    keys = list(client.scan_iter(match="genmesh:gw:{m}:prefix:*"))
    assert keys, "the prefix map is in Redis"
    ttls = [client.pttl(k) for k in keys]
    assert all(0 < t <= PREFIX_TTL_S * 1000 for t in ttls), ttls


def test_imbalance_guard_falls_back_to_least_loaded(start_gateway: Any, fakes: dict[str, Fake]) -> None:
    gw = start_gateway(_route(fakes, routing="prefix-affinity", affinity_max_imbalance=2))
    for f in fakes.values():
        f.hold(True)

    def in_flight() -> list[int]:
        return sorted(f.stats()["in_flight"] for f in fakes.values())

    async def run() -> list[list[int]]:
        seen: list[list[int]] = []
        async with httpx.AsyncClient(timeout=30) as client:
            sent = []
            for k in range(1, 6):
                body = _body(_system_prompt(0), f"q{k}", stream=True)
                sent.append(asyncio.create_task(client.post(gw.url + "/v1/chat/completions", json=body)))
                await until(lambda k=k: sum(in_flight()) >= k, 10, f"request {k} at an upstream")
                seen.append(in_flight())
            for f in fakes.values():
                f.hold(False)
            replies = await asyncio.gather(*sent)
        assert all(r.status_code == 200 for r in replies)
        return seen

    seen = asyncio.run(run())
    # 1 miss, 2 hits (the preferred one 2 ahead at most), then the guard: the 4th goes to the other,
    # which the prefix now names, so the 5th follows it there
    assert seen == [[0, 1], [0, 2], [0, 3], [1, 3], [2, 3]], seen
    metrics = httpx.get(gw.url + "/metrics", timeout=5).text
    results = {x: counter(metrics, "genmesh_gateway_affinity_total", model="m", result=x) for x in ("hit", "miss")}
    results["fallback"] = counter(metrics, "genmesh_gateway_affinity_total", model="m", result="fallback")
    assert results == {"miss": 1.0, "hit": 3.0, "fallback": 1.0}


def test_least_loaded_route_writes_no_prefix_keys(
    start_gateway: Any, fakes: dict[str, Fake], redis_server: Any
) -> None:
    gw = start_gateway(_route(fakes))
    r = httpx.post(gw.url + "/v1/chat/completions", json=_body(_system_prompt(3), "q"), timeout=30)
    assert r.status_code == 200
    wait_until(lambda: fakes[r.headers["x-upstream"]].stats()["completed"] == 1, 5, what="the reply counted")
    assert not list(redis_server.client().scan_iter(match="genmesh:gw:*:prefix:*"))
