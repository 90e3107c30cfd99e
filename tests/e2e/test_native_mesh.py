"""The native launcher brings the whole mesh up, answers the seed's requests, and stops cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from support.servers import DEFAULT_MODEL, MODEL_NAME, ROOT, free_port, wait_until


@dataclass
class Mesh:
    proc: subprocess.Popen[str]
    lines: list[str]
    ports: dict[str, int]
    run_dir: Path

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"


def _read(stream: object, lines: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.append(line)


def launch(run_dir: Path, ports: dict[str, int]) -> Mesh:
    argv = [
        sys.executable,
        str(ROOT / "scripts" / "launch_mesh.py"),
        "--model", str(DEFAULT_MODEL),
        "--served-model-name", MODEL_NAME,
        "--engine-port", str(ports["engine"]),
        "--microservice-port", str(ports["microservice"]),
        "--gateway-port", str(ports["gateway"]),
        "--redis-url", f"redis://127.0.0.1:{ports['redis']}/0",
        "--run-dir", str(run_dir),
        "--engine-arg=--cache-size=1",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=_read, args=(proc.stdout, lines), daemon=True).start()
    return Mesh(proc, lines, ports, run_dir)


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[Mesh]:
    ports = {name: free_port() for name in ("engine", "microservice", "gateway", "redis")}
    m = launch(tmp_path / "run", ports)

    def up() -> bool:
        assert m.proc.poll() is None, "".join(m.lines[-30:])
        return any("the mesh is up" in line for line in m.lines)

    try:
        wait_until(up, 240, interval_s=0.2, what="the mesh to come up")
        yield m
    finally:
        if m.proc.poll() is None:
            m.proc.send_signal(signal.SIGINT)
            try:
                m.proc.wait(60)
            except subprocess.TimeoutExpired:
                m.proc.kill()


def test_mesh_serves_the_seed_requests_and_stops_clean(mesh: Mesh) -> None:
    children = psutil.Process(mesh.proc.pid).children(recursive=True)
    assert len(children) >= 4  # redis, engine (+ its core), microservice, gateway
    # the seed's curl to the microservice: messages as a string
    r = httpx.post(
        mesh.url("microservice") + "/v1/chat/completions",
        json={"model": "${model_name}", "messages": "What is Deep Learning?", "max_tokens": 17},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "text_completion"
    assert 1 <= r.json()["usage"]["completion_tokens"] <= 17  # (the end-of-text token counts)
    # and through the gateway, as the launcher's summary line says (a sample: its text may be empty)
    said = {"messages": [{"role": "user", "content": "What is Deep Learning?"}], "max_tokens": 17}
    r = httpx.post(mesh.url("gateway") + "/v1/chat/completions", json=said, timeout=120)
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["choices"][0]["message"]["content"], str)
    assert 1 <= r.json()["usage"]["completion_tokens"] <= 17
    # greedy to a fixed length, the answer's text comes back whole
    fixed = {**said, "temperature": 0, "ignore_eos": True}
    r = httpx.post(mesh.url("gateway") + "/v1/chat/completions", json=fixed, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]
    assert r.json()["usage"]["completion_tokens"] == 17
    assert any("curl" in line for line in mesh.lines)
    # a second launch on the same run dir does not start another copy
    again = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "launch_mesh.py"), "--run-dir", str(mesh.run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0
    assert "already running" in again.stdout
    # Ctrl-C stops every process the launcher started
    mesh.proc.send_signal(signal.SIGINT)
    assert mesh.proc.wait(60) == 0
    wait_until(
        lambda: not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children),
        30,
        what="every mesh process to exit",
    )
    assert (mesh.run_dir / "logs" / "engine.log").stat().st_size > 0
