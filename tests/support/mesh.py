"""The whole mesh as ``make run`` starts it (scripts/launch_mesh.py), on free loopback ports.

Its processes are found as the launcher's descendants, by their command line: tests signal only
processes they started (the launcher and what it started), never anything found by name alone.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from support.polling import wait_until
from support.servers import DEFAULT_MODEL, MODEL_NAME, ROOT

MARKERS = {
    "redis": "redis-server",
    "engine": "genmesh-engine",
    "microservice": "genmesh-microservice",
    "gateway": "genmesh-gateway",
}


@dataclass
class Mesh:
    proc: subprocess.Popen[str]
    lines: list[str]
    ports: dict[str, int]
    run_dir: Path
    _reader: threading.Thread | None = field(default=None, repr=False)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.ports['redis']}/0"

    def output(self, last: int = 40) -> str:
        return "".join(self.lines[-last:])

    def process(self, name: str) -> psutil.Process:
        """The launcher's live child running component ``name`` (redis, engine, microservice, gateway)."""
        marker = MARKERS[name]
        found = []
        for child in psutil.Process(self.proc.pid).children():
            try:
                if child.status() != psutil.STATUS_ZOMBIE and any(marker in part for part in child.cmdline()):
                    found.append(child)
            except psutil.NoSuchProcess:
                continue
        assert len(found) == 1, f"{name}: {found}\n{self.output()}"
        return found[0]

    def engine_core(self) -> psutil.Process:
        """The engine API process's engine-core child (a multiprocessing spawn)."""
        cores = []
        for child in self.process("engine").children():
            try:
                if child.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(child.cmdline()):
                    cores.append(child)
            except psutil.NoSuchProcess:
                continue
        assert len(cores) == 1, cores
        return cores[0]

    def pids(self) -> dict[str, int]:
        return {name: self.process(name).pid for name in MARKERS}

    def stop(self, timeout_s: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def _read(stream: object, lines: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.append(line)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(size: int) -> int:
    """A port ``p`` with ``p`` .. ``p + size - 1`` free, below the kernel's ephemeral range: the launcher puts
    replica k on its base port + k - 1, and a port the kernel could hand to an outgoing connection (a health
    poll's source port) between this check and the bind was seen taken ('address already in use')."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        base = random.randrange(max(1024, low - 12_000), low - size)
        if all(_bindable(base + i) for i in range(size)):
            return base
    raise RuntimeError(f"no {size} free ports in a row below {low}")


def launch(
    run_dir: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    engine_args: Sequence[str] = (),
    gateway_slots: int | None = None,
    model: Path = DEFAULT_MODEL,
    served_name: str = MODEL_NAME,
) -> Mesh:
    """Start the launcher; ``gateway_slots``: route the model through the microservice with this many slots."""
    base = free_port_block(16)  # four each: the engine and microservice ports of up to four replicas
    ports = {name: base + 4 * i for i, name in enumerate(("engine", "microservice", "gateway", "redis"))}
    if gateway_slots is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        config = run_dir / "chaos-gateway.yaml"
        upstream = {"url": f"http://127.0.0.1:{ports['microservice']}", "health_path": "/v1/ready"}
        route = {"upstreams": [{**upstream, "name": "microservice", "max_concurrency": gateway_slots}]}
        config.write_text(json.dumps({"models": {served_name: {**route, "max_queue_wait_s": 120}}}))
        extra = ("--gateway-config", str(config), *extra)
    argv = [
        sys.executable,
        str(ROOT / "scripts" / "launch_mesh.py"),
        "--model", str(model),
        "--served-model-name", served_name,
        "--engine-port", str(ports["engine"]),
        "--microservice-port", str(ports["microservice"]),
        "--gateway-port", str(ports["gateway"]),
        "--redis-url", f"redis://127.0.0.1:{ports['redis']}/0",
        "--run-dir", str(run_dir),
        "--engine-arg=--cache-size=1",
        *(f"--engine-arg={arg}" for arg in engine_args),
        *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    lines: list[str] = []
    reader = threading.Thread(target=_read, args=(proc.stdout, lines), daemon=True)
    reader.start()
    return Mesh(proc, lines, ports, run_dir, reader)


def wait_up(mesh: Mesh, timeout_s: float = 240) -> None:
    def up() -> bool:
        assert mesh.proc.poll() is None, mesh.output(30)
        return any("the mesh is up" in line for line in mesh.lines)

    wait_until(up, timeout_s, interval_s=0.2, what="the mesh to come up")
