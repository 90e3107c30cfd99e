"""The hostile-input suite's mesh: a real engine (its own, with ``--max-tokens-limit`` so that the
valid requests property-based testing makes stay short), a microservice and a gateway (API keys on)
with their default limits, a real Redis, and a prober that times every hop's health endpoint
throughout (a process of its own, so that the suite's client does not slow its measurements).

``make test`` runs the bounded form; ``make fuzz`` (``GENMESH_FUZZ=full``) the full one."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from support.gateway_helpers import ADMIN_KEY, launch_gateway
from support.hostile import COUNTS, FIGURES, FULL, STARTED, Hop, route_to, start_microservice
from support.servers import ROOT, Server, start_engine

LAST = "test_health_stayed_fast_during_the_suite"
TENANCY = ("test_hostile_tenancy", "test_hostile_admission")  # load the CPU on purpose: after the health check


@dataclass
class HostileMesh:
    engine: Server
    microservice: Server
    gateway: Server
    key: str
    probe: subprocess.Popen[bytes]
    probe_out: Path

    def hops(self) -> list[Hop]:
        return [
            Hop("engine", self.engine.url),
            Hop("microservice", self.microservice.url, health="/v1/health_check"),
            Hop("gateway", self.gateway.url, {"Authorization": f"Bearer {self.key}"}),
        ]


def new_key(gateway: str) -> str:
    r = httpx.post(
        gateway + "/admin/keys", json={"tenant": "hostile"}, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert r.status_code == 201, r.text
    key: str = r.json()["api_key"]
    return key


@pytest.fixture(scope="session")
def hostile(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[HostileMesh]:
    redis = request.getfixturevalue("redis_server")
    logs = tmp_path_factory.mktemp("hostile")
    engine = start_engine(logs, "--max-tokens-limit", "16")
    servers = [engine]
    try:
        servers.append(microservice := start_microservice(logs, engine.url))
        config = logs / "gateway.yaml"
        config.write_text(json.dumps(route_to(microservice.url, 8)))
        servers.append(gateway := launch_gateway(logs, config, redis.url, "--auth", "on"))
        key = new_key(gateway.url)
        probe_out = logs / "health-probe.json"
        urls = [
            f"engine={engine.url}/health",
            f"microservice={microservice.url}/v1/health_check",
            f"gateway={gateway.url}/health",
        ]
        probe = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "support" / "health_probe.py"), str(probe_out), *urls],
            stdin=subprocess.PIPE,
        )
        yield HostileMesh(engine, microservice, gateway, key, probe, probe_out)
        if probe.poll() is None:
            probe.kill()
    finally:
        for server in reversed(servers):
            server.stop()


@pytest.fixture(autouse=True)
def _note_start(request: pytest.FixtureRequest) -> None:
    STARTED.append((time.time(), request.node.name))


@pytest.fixture
def capped_microservice(hostile: HostileMesh, tmp_path: Path) -> Iterator[Server]:
    """A microservice of its own that takes at most 4 connections."""
    server = start_microservice(tmp_path, hostile.engine.url, "--max-client-connections", "4")
    yield server
    server.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The health check judges the hostile-input tests, so it runs after them; the tenancy abuses
    (test_hostile_tenancy.py, a mesh of their own) and the admission abuses (test_hostile_admission.py)
    load the CPU on purpose, so they run after it."""
    last = [item for item in items if item.name == LAST]
    tenancy = [item for item in items if item.module is not None and item.module.__name__.endswith(TENANCY)]
    first = [item for item in items if item not in last and item not in tenancy]
    items[:] = first + last + tenancy


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not FIGURES and not COUNTS:
        return
    tr = terminalreporter
    tr.section(f"hostile-input figures ({'full' if FULL else 'bounded'} form; {cpu_name()})")
    for hop, c in COUNTS.items():
        tr.write_line(f"{'hostile requests':<34} {hop:<13} {c['sent']:8d}  5xx: {c['5xx']}")
    for what, hop, value, limit in FIGURES:
        tr.write_line(f"{what:<34} {hop:<13} {value:8.2f}  {limit}")


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"
