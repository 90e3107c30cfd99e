"""Real servers for tests: each runs as a subprocess on a free loopback port, polled until healthy."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from genmesh.bench.servers import ManagedServer, free_port, listens
from support.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
EMBEDDING_MODEL = ROOT / "models" / "all-MiniLM-L6-v2"
EMBEDDING_NAME = "all-MiniLM-L6-v2"


class Server(ManagedServer):
    """The benchmarks' server process (stopped with SIGTERM, SIGKILL after a timeout), with its log's tail."""

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def start_server(
    name: str,
    argv: Sequence[str],
    port: int,
    log_dir: Path,
    health_path: str = "/health",
    timeout_s: float = 180.0,
    env: dict[str, str] | None = None,
    cpus: frozenset[int] = frozenset(),
) -> Server:
    """``cpus``: the process (and what it starts) runs on these CPUs only (empty: on any)."""
    log_path = log_dir / f"{name}-{port}.log"
    log_file = log_path.open("wb")
    proc = subprocess.Popen(
        list(argv),
        stdout=log_file,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    server = Server(name, proc, f"http://127.0.0.1:{port}", log_path)

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"{name} exited with {proc.returncode}:\n{server.log_tail()}")
        try:
            return httpx.get(server.url + health_path, timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, timeout_s, interval_s=0.2, what=f"{name} to become healthy")
        if not listens(proc, port):  # a free port is free only when chosen
            raise AssertionError(f"{name}: another process took port {port} and answered:\n{server.log_tail()}")
    except BaseException:
        server.stop()
        raise
    return server


def start_engine(
    log_dir: Path,
    *extra: str,
    port: int | None = None,
    model: Path = DEFAULT_MODEL,
    cpus: frozenset[int] = frozenset(),
    timeout_s: float = 180.0,
) -> Server:
    port = port or free_port()
    argv = [
        sys.executable,
        "-m",
        "genmesh.engine",
        "--model",
        str(model),
        "--port",
        str(port),
        "--cache-size",
        "1",
        "--stats-log-interval-s",
        "0",
        *extra,
    ]
    return start_server("engine", argv, port, log_dir, cpus=cpus, timeout_s=timeout_s)


def start_repository_engine(config: Path, log_dir: Path, *extra: str, timeout_s: float = 240.0) -> Server:
    """The engine serving an OVMS ``config.json``, once every model is loaded or failed to load
    (``/v1/models`` answers as soon as the server listens; the models load behind it)."""
    port = free_port()
    argv = [sys.executable, "-m", "genmesh.engine", "--config-path", str(config), "--port", str(port)]
    argv += ["--cache-size", "1", "--stats-log-interval-s", "0", *extra]
    server = start_server("engine-repo", argv, port, log_dir, health_path="/v1/models")
    last: dict[str, Any] = {}  # the last /v1/config seen, for the failure message

    def settled() -> bool:
        try:  # the server is sluggish while tokenizers load (they hold the GIL)
            states = httpx.get(server.url + "/v1/config", timeout=2).json()
        except httpx.HTTPError as exc:
            last["error"] = repr(exc)
            return False
        last["config"] = states
        return all(
            s["model_version_status"][0]["status"]["error_code"] != "OK"
            or s["model_version_status"][0]["state"] == "AVAILABLE"
            for s in states.values()
        )

    try:
        wait_until(settled, timeout_s, interval_s=0.2, what="every model loaded or failed")
    except AssertionError as exc:
        server.stop()
        raise AssertionError(f"{exc}; last seen: {last}; engine log:\n{server.log_tail(60)}") from exc
    except BaseException:
        server.stop()
        raise
    return server


def metric_value(base_url: str, name: str) -> float:
    """Read one unlabelled sample from a Prometheus /metrics page."""
    text = httpx.get(base_url + "/metrics", timeout=5.0).text
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name} not found")


# `make test-vllm` runs the suites against vLLM (GENMESH_TEST_ENGINE_URL); checks of our engine's
# own error codes, parameter refusals and health body are skipped there, and only there.
EXTERNAL_ENGINE_URL = os.environ.get("GENMESH_TEST_ENGINE_URL", "").rstrip("/")
GENMESH_ENGINE_ONLY = pytest.mark.skipif(
    bool(EXTERNAL_ENGINE_URL), reason="checks genmesh-engine's own behaviour; the suite runs against another engine"
)

ENGINE_RUNNING_GAUGES = ("genmesh_engine_requests_running", "vllm:num_requests_running")


def engine_running(base_url: str) -> float:
    """Requests the engine is generating: our gauge, or vLLM's when the suite runs against vLLM."""
    for name in ENGINE_RUNNING_GAUGES:
        try:
            return metric_value(base_url, name)
        except AssertionError:
            continue
    raise AssertionError(f"no running-requests gauge on {base_url}/metrics")
