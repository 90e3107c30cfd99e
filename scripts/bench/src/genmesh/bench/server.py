"""The engine's HTTP server as a subprocess on a free loopback port."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
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


@dataclass
class EngineServer:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    @classmethod
    def start(cls, model: str, scheduler: Scheduler, log_path: Path, timeout_s: float = 300.0) -> EngineServer:
        """Start ``python -m genmesh.engine`` and return once ``/health`` answers 200."""
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "genmesh.engine",
            "--model",
            model,
            "--port",
            str(port),
            *scheduler.engine_flags(),
        ]
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT)
        server = cls(proc, f"http://127.0.0.1:{port}", log_path)
        try:
            server._wait_healthy(timeout_s)
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise ServerError(f"engine exited with {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    if client.get(self.url + "/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
        raise ServerError(f"engine not healthy after {timeout_s:.0f}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)
