"""The circuit breaker of an upstream (gateway/routing/upstreams.py, issue 45): evidence from a request sent
before the probe that found the upstream healthy again is stale and opens nothing; a request that
finds no upstream probes a half-open one itself (once per probe interval), and the Retry-After of
its ``no_healthy_upstream`` 503 says when the next probe is due. The probes go to the real fake
upstream over HTTP; the circuit's clock is the real monotonic clock, with evidence dated explicitly."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from genmesh.gateway.routing.config import ModelRoute, RoutingConfig, UpstreamConfig
from genmesh.gateway.routing.upstreams import Pool, Upstream
from genmesh.gateway.settings import GatewaySettings
from support.gateway_helpers import Fake
from support.polling import until
from support.servers import free_port, start_server

Transitions = list[tuple[str, str]]


class Clock:
    """The upstream's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _recovered() -> tuple[Upstream, Clock, Transitions]:
    """An upstream (opened by one failure) with a stream sent at 1000 s, found down by its probe at
    1010 s, and found healthy again by a probe sent at 1016 s (after its 5 s cool-down); now 1017 s."""
    clock = Clock()
    seen: Transitions = []
    on = lambda _u, to, cause: seen.append((to, cause))  # noqa: E731
    up = Upstream(UpstreamConfig(url="http://127.0.0.1:9"), 1, cooldown_s=5.0, on_transition=on, clock=clock)
    up.stream_began("killed")
    clock.now = 1010.0
    up.probe_failed(clock.now)
    clock.now = 1016.0
    up.advance()
    up.probe_passed(clock.now)
    clock.now = 1017.0
    assert up.available()
    assert seen == [("open", "probe"), ("half-open", "cooldown"), ("closed", "probe")]
    return up, clock, seen


def test_stale_stall_and_stale_failure_after_a_passing_probe_open_nothing() -> None:
    up, clock, seen = _recovered()
    # the killed stream's failure, landing after the recovery: stale (sent before the probe)
    up.record_failure("stream failed", up.stream_sent_at("killed"), "rid-old")
    assert up.available()
    assert up.failures == 0
    # the killed stream silent since 1000 s, far past the progress timeout: stale too
    clock.now = 1030.0
    up.check_progress(timeout_s=2.0)
    assert up.available()
    assert len(seen) == 3
    assert (up.circuit(), up.cause) == ("closed", "probe")
    # fresh evidence still counts: a stream sent after the recovery, silent past the timeout
    up.stream_began("new")
    clock.now = 1032.5
    up.check_progress(timeout_s=2.0)
    assert not up.available()
    assert seen[-1] == ("open", "stall")
    assert (up.circuit(), up.cause) == ("open", "stall")


def test_a_fresh_failure_still_opens_the_circuit() -> None:
    up, clock, seen = _recovered()
    up.record_failure("status 503", 1016.5, "rid-new")  # sent after the probe that passed
    assert not up.available()
    assert seen[-1] == ("open", "request_failure")
    # a probe sent before that failure was seen says nothing about it: the circuit stays open
    up.probe_passed(1016.8)
    assert not up.available()
    # one sent after it closes it (even while cooling down)
    up.probe_passed(clock.now)
    assert up.available()
    assert seen[-1] == ("closed", "probe")


def test_passing_probes_without_failures_leave_the_progress_watch_alone() -> None:
    """A hung engine whose /health still passes: its probes are no recovery, its silent streams open the circuit."""
    clock = Clock()
    seen: Transitions = []
    on = lambda _u, to, cause: seen.append((to, cause))  # noqa: E731
    up = Upstream(UpstreamConfig(url="http://127.0.0.1:9"), 3, cooldown_s=5.0, on_transition=on, clock=clock)
    up.stream_began("hung")
    clock.now = 1005.0
    up.probe_passed(clock.now)
    up.check_progress(timeout_s=2.0)
    assert seen == [("open", "stall")]
    assert not up.available()


@pytest.fixture(scope="module")
def own_fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fake]:
    """A fake upstream of this module's own: the session's is probed by other suites' gateways too,
    and these tests count the health checks one gateway (or pool) makes."""
    port = free_port()
    script = Path(__file__).parent.parent / "support" / "fake_upstream.py"
    argv = [sys.executable, str(script), "--port", str(port), "--delay-ms", "20"]
    server = start_server("fake-upstream", argv, port, tmp_path_factory.mktemp("circuit-fake"), timeout_s=30)
    try:
        yield Fake(server.url)
    finally:
        server.stop()


@pytest.fixture
def fake(own_fake: Fake) -> Fake:
    own_fake.control(hold=False, delay_ms=20, fail_status=0, health_status=200, reset=True)
    return own_fake


def _pool(fake_url: str, **settings: Any) -> tuple[Pool, ModelRoute, Upstream]:
    config = RoutingConfig.model_validate({"models": {"m": {"upstreams": [{"url": fake_url}]}}})
    pool = Pool(config, GatewaySettings(**settings))
    route = config.models["m"]
    return pool, route, pool.upstreams(route)[0]


async def test_a_request_finding_no_upstream_probes_a_half_open_one_at_once(fake: Any) -> None:
    pool, route, up = _pool(fake.url, circuit_failures=1, circuit_probe_interval_s=2.5, circuit_cooldown_s=5.0)
    async with httpx.AsyncClient() as client:
        pool.client = client
        # half-open (cool-down over), just probed by the probe loop: the request's own probe goes out now
        up.probe_failed(time.monotonic())
        up.open_until = time.monotonic() - 1
        up.probed_at = time.monotonic()
        assert up.circuit() == "half-open"
        assert not pool.any_available(route)
        checks = fake.stats()["health_checks"]
        await pool.probe_now(route)
        assert fake.stats()["health_checks"] == checks + 1
        assert pool.any_available(route)
        assert up.cause == "probe"

        # half-open and just probed (failed) for a request: no second such probe within the interval, and
        # Retry-After says when the next probe (the loop's or a request's) is due
        up.probe_failed(time.monotonic())
        up.open_until = time.monotonic() - 1
        up.probed_at = up.demand_probed_at = time.monotonic()
        await pool.probe_now(route)
        assert fake.stats()["health_checks"] == checks + 1
        assert not pool.any_available(route)
        assert pool.next_probe_in(route) == 3  # ceil(2.5 s)
        up.probed_at -= 2.4  # the probe loop's next round is due in 0.1 s
        assert pool.next_probe_in(route) == 1  # due in 0.1 s: at least 1

    # cooling down after a stall (its health check cannot see one): no probe before the cool-down ends
    pool, route, up = _pool(fake.url, circuit_probe_interval_s=0.5, circuit_cooldown_s=5.0)
    async with httpx.AsyncClient() as client:
        pool.client = client
        up.stream_began("silent")
        up.last_output = time.monotonic() - 10
        up.check_progress(timeout_s=1.0)
        assert (up.circuit(), up.cause) == ("open", "stall")
        checks = fake.stats()["health_checks"]
        await pool.probe_now(route)
        assert fake.stats()["health_checks"] == checks
        assert not pool.any_available(route)
        assert pool.next_probe_in(route) == 5  # the cool-down


async def test_no_healthy_upstream_probes_on_demand_and_says_when_next(
    start_gateway: Any, fake: Any, helpers: Any
) -> None:
    """Opened by a request failure with a long cool-down (no periodic probe in it): the refused
    request's own probe is the next probe, Retry-After the probe interval, and a request after the
    upstream recovered is served by its own probe, long before the cool-down ends."""
    models = {"m": helpers.model_config(fake.url, max_concurrency=2, retry_after_s=7)}
    flags = ("--circuit-failures", "1", "--circuit-cooldown-s", "60", "--health-interval-s", "60")
    gw = start_gateway(models, *flags, "--circuit-probe-interval-s", "0.5")
    fake.control(fail_status=503, health_status=503)
    async with httpx.AsyncClient() as client:
        url = gw.url + "/v1/chat/completions"
        first = await client.post(url, json=helpers.chat("m", "fails"), timeout=10)
        assert first.status_code == 503
        assert first.headers["retry-after"] == "7"  # the upstream's own
        checks = fake.stats()["health_checks"]
        refused = await client.post(url, json=helpers.chat("m", "refused"), timeout=10)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "no_healthy_upstream"
        assert refused.headers["retry-after"] == "1"  # the next probe: ceil(0.5 s)
        assert fake.stats()["health_checks"] == checks + 1  # the request probed it
        fake.control(fail_status=0, health_status=200)

        async def served() -> bool:
            r = await client.post(url, json=helpers.chat("m", "back"), timeout=10)
            assert r.status_code in (200, 503), r.text
            assert r.status_code == 200 or r.headers["retry-after"] == "1"
            return r.status_code == 200

        await until(served, 10, "a request to probe the upstream and be served", every_s=0.1)
        metrics = (await client.get(gw.url + "/metrics", timeout=5)).text
    name = helpers.upstream_name(fake.url)
    counted = {
        frozenset(line.split("{", 1)[1].split("}", 1)[0].split(",")): float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("genmesh_gateway_circuit_transitions_total{")
    }
    for to, cause in (("open", "request_failure"), ("closed", "probe")):
        key = frozenset((f'upstream="{name}"', f'to="{to}"', f'cause="{cause}"'))
        assert counted.get(key) == 1.0, counted
