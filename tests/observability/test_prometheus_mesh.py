"""A real Prometheus (Debian's) scrapes a real mesh (scripts/launch_mesh.py: Redis, engine,
microservice, gateway) with the shipped config and rules while traffic runs: every panel query of
the dashboard returns at least one series; a scrape during an engine core restart still answers,
and the core-restart alert fires in that Prometheus."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from support.mesh import Mesh, free_port_block, launch, wait_up
from support.polling import wait_until

from ._prometheus import DASHBOARD, PROMETHEUS_DIR, binary

SCRAPE_S = 1


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, query) for every target of every panel, the dashboard's variables at "All"."""
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"].replace("$model", ".*")))
    return out


def prometheus_config(mesh: Mesh) -> dict[str, Any]:
    """The make-run config as shipped, on the test mesh's ports, scraped and evaluated every second."""
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus-native.yml").read_text())
    config["global"] = {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"}
    config["rule_files"] = [str(PROMETHEUS_DIR / path) for path in config["rule_files"]]
    ports = {"genmesh-engine": "engine", "genmesh-microservice": "microservice", "genmesh-gateway": "gateway"}
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [f"127.0.0.1:{mesh.ports[ports[job['job_name']]]}"]}]
    return config


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    m = launch(tmp_path_factory.mktemp("mesh") / "run")
    try:
        wait_up(m)
        yield m
    finally:
        m.stop()


@pytest.fixture(scope="module")
def prometheus(mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("prometheus")
    (home / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config(mesh)))
    port = free_port_block(1)
    proc = subprocess.Popen(
        [
            binary("prometheus"),
            f"--config.file={home / 'prometheus.yml'}",
            f"--storage.tsdb.path={home / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(home / "prometheus.log").open("w"),
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert proc.poll() is None, (home / "prometheus.log").read_text()[-3000:]
        try:
            return httpx.get(url + "/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, 60, interval_s=0.2, what="Prometheus to be ready")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def traffic(mesh: Mesh) -> Iterator[None]:
    """Streams and plain replies through the gateway, one after another, until the module ends."""
    stop = threading.Event()
    errors: list[str] = []

    def run() -> None:
        body = {"messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": 8}
        with httpx.Client(base_url=mesh.url("gateway"), timeout=120) as client:
            while not stop.is_set():
                for stream in (True, False):
                    try:
                        with client.stream("POST", "/v1/chat/completions", json={**body, "stream": stream}) as r:
                            r.read()
                    except httpx.HTTPError as exc:
                        errors.append(repr(exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(150)


def query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    r = httpx.get(prometheus + "/api/v1/query", params={"query": expr}, timeout=10)
    assert r.status_code == 200, (expr, r.text)
    result: list[dict[str, Any]] = r.json()["data"]["result"]
    return result


@pytest.mark.usefixtures("traffic")
def test_every_dashboard_panel_returns_data_from_a_real_prometheus(prometheus: str) -> None:
    queries = panel_queries()
    assert len(queries) >= 25
    pending = dict.fromkeys(queries)

    def all_answered() -> list[tuple[str, str]] | bool:
        for item in list(pending):
            if query(prometheus, item[1]):
                del pending[item]
        return not pending or list(pending)

    try:
        wait_until(lambda: all_answered() is True, 240, interval_s=1, what="every panel query to return a series")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; no series from: {list(pending)}") from None
    # the recording rules ran on real data: a model's TTFT p99 at the gateway is a number of seconds
    ttft = query(prometheus, "model:genmesh_gateway_time_to_first_token_seconds:p99_5m")
    assert {s["metric"]["model"] for s in ttft} == {"SmolLM2-135M-Instruct"}
    assert 0 < float(ttft[0]["value"][1]) < 120
    # and no alert fires on a healthy mesh
    assert query(prometheus, 'ALERTS{alertstate="firing"}') == []


@pytest.mark.usefixtures("traffic")
def test_a_scrape_during_a_core_restart_answers_and_the_alert_fires(mesh: Mesh, prometheus: str) -> None:
    engine = mesh.url("engine")
    core = mesh.engine_core()
    core.send_signal(signal.SIGKILL)
    scrapes: list[int] = []

    def restarted() -> bool:
        r = httpx.get(engine + "/metrics", timeout=5)
        scrapes.append(r.status_code)
        text = r.text
        return 'genmesh_engine_core_restarts_total{cause="exited",model="SmolLM2-135M-Instruct"} 1.0' in text and any(
            line.startswith("genmesh_engine_core_uptime_seconds{") and not line.endswith(" 0.0")
            for line in text.splitlines()
        )

    wait_until(restarted, 180, interval_s=0.1, what="the engine core to be replaced")
    assert len(scrapes) >= 2, scrapes
    assert set(scrapes) == {200}, scrapes
    assert mesh.engine_core().pid != core.pid

    def firing() -> list[dict[str, Any]]:
        return query(prometheus, 'ALERTS{alertname="GenmeshEngineCoreRestarts", alertstate="firing"}')

    wait_until(firing, 60, interval_s=0.5, what="GenmeshEngineCoreRestarts to fire")
    assert firing()[0]["metric"]["cause"] == "exited"
