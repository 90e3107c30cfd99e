"""Gateway test rig: a real Redis (session, flushed per test), a fake upstream, real gateway processes.

The shared gateway serves several models from one config, each with the limits a test needs, all
pointing at the same fake upstream; tests that need their own gateways (two replicas, kill -9,
Redis restart, the real engine) start them with ``start_gateway``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import redis
import yaml

from genmesh.gateway.redis.keys import KeySpace

__all__ = ["KeySpace"]
from support.polling import wait_until
from support.servers import MODEL_NAME, Server, free_port, start_server

ADMIN_KEY = "test-admin-key"
LEASE_TTL_S = 2.0
GATEWAY_FLAGS = (
    "--lease-ttl-s",
    str(LEASE_TTL_S),
    "--reclaim-interval-s",
    "0.5",
    "--recheck-interval-s",
    "1",
    "--health-interval-s",
    "0.5",
    "--circuit-cooldown-s",
    "1",
)
# The admin key reaches the gateway through its environment, never its command line.
GATEWAY_ENV = {"GENMESH_GATEWAY_ADMIN_KEY": ADMIN_KEY}


@dataclass
class RedisServer:
    port: int
    dir: Path
    proc: subprocess.Popen[bytes] | None = None
    password: str | None = None  # given to redis-server in a config file, as the launcher does
    extra: tuple[str, ...] = ()  # more redis-server arguments (e.g. "--maxmemory", "64mb")

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5, password=self.password)

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed: run 'make redis' (scripts/ensure_redis.sh install)"
        conf = self.dir / f"redis-{self.port}.conf"
        conf.write_text(f"requirepass {self.password}\n" if self.password else "")
        argv = [binary, str(conf), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(
            [*argv, *self.extra],
            cwd=self.dir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )

        def up() -> bool:
            try:
                return bool(self.client().ping())
            except redis.RedisError:
                return False

        wait_until(up, 10, what="redis-server to answer")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis server started for a fixture and stopped after it."""
    server = RedisServer(free_port(), tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from private_redis(tmp_path_factory)


@pytest.fixture(scope="session")
def fake_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = free_port()
    argv = [sys.executable, str(Path(__file__).with_name("fake_upstream.py")), "--port", str(port), "--delay-ms", "20"]
    server = start_server("fake-upstream", argv, port, tmp_path_factory.mktemp("fake-logs"), timeout_s=30)
    yield server
    server.stop()


class Fake:
    """Control and inspect the fake upstream."""

    def __init__(self, url: str) -> None:
        self.url = url

    def control(self, **ctl: Any) -> dict[str, Any]:
        r = httpx.post(self.url + "/control", json=ctl, timeout=5)
        r.raise_for_status()
        data: dict[str, Any] = r.json()
        return data

    def stats(self) -> dict[str, Any]:
        data: dict[str, Any] = httpx.get(self.url + "/stats", timeout=5).json()
        return data

    def hold(self, on: bool) -> None:
        self.control(hold=on)


@pytest.fixture
def fake(fake_upstream: Server) -> Iterator[Fake]:
    f = Fake(fake_upstream.url)
    f.control(hold=False, delay_ms=20, fail_status=0, fail_code="", health_status=200)
    wait_until(lambda: f.stats()["in_flight"] == 0, 15, what="fake upstream idle before the test")
    f.control(reset=True)
    yield f
    f.control(hold=False, delay_ms=20, fail_status=0, fail_code="", health_status=200)


# The suites whose tests each start from an empty Redis. Others share one Redis across a session on
# purpose: the hostile suite's mesh, for one, creates its API key once (a flush would revoke it).
FLUSHED_SUITES = ("gateway", "e2e")


@pytest.fixture(autouse=True)
def _flush_redis(request: pytest.FixtureRequest) -> None:
    if request.path.parent.name not in FLUSHED_SUITES:
        return
    if "redis_server" in request.fixturenames or "gw" in request.fixturenames:
        server: RedisServer = request.getfixturevalue("redis_server")
        server.client().flushall()


def model_config(upstream: str, **limits: Any) -> dict[str, Any]:
    ups = limits.pop("upstreams", None) or [{"url": upstream, "max_concurrency": limits.pop("max_concurrency", 1)}]
    return {"upstreams": ups, **limits}


StartGateway = Callable[..., Server]


def _write_config(path: Path, models: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"models": models}))
    return path


def launch_gateway_for(log_dir: Path, models: dict[str, Any], redis_url: str, *extra: str) -> Server:
    """A gateway routing ``models`` (the config file's ``models`` mapping, written to ``log_dir``)."""
    config = log_dir / "gateway.json"
    config.write_text(json.dumps({"models": models}))
    return launch_gateway(log_dir, config, redis_url, *extra)


def launch_gateway(log_dir: Path, config: Path, redis_url: str, *extra: str) -> Server:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "genmesh.gateway",
        "--config",
        str(config),
        "--port",
        str(port),
        "--redis-url",
        redis_url,
        *GATEWAY_FLAGS,
        *extra,
    ]
    return start_server("gateway", argv, port, log_dir, timeout_s=60, env=GATEWAY_ENV)


@pytest.fixture
def start_gateway(tmp_path: Path, redis_server: RedisServer) -> Iterator[StartGateway]:
    """``start_gateway(models, *flags)``: a gateway of the test's own, stopped after it."""
    started: list[Server] = []

    def start(models: dict[str, Any], *extra: str, redis_url: str | None = None) -> Server:
        cfg = _write_config(tmp_path / f"gateway-{len(started)}.yaml", models)
        server = launch_gateway(tmp_path, cfg, redis_url or redis_server.url, *extra)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def mesh_microservice(engine_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A microservice in front of the session's real engine, for gateway tests of the whole mesh."""
    port = free_port()
    argv = [sys.executable, "-m", "genmesh.microservice", "--llm-endpoint", engine_url, "--port", str(port)]
    argv += ["--model-id", MODEL_NAME]
    log_dir: Path = tmp_path_factory.mktemp("mesh-microservice")
    server = start_server(
        "microservice", argv, port, log_dir, health_path="/v1/health_check", env={"OPENAI_API_KEY": ""}
    )
    yield server
    server.stop()


SHARED_MODELS = {
    # one slot, a deep queue: ordering, cancellation, rate limits
    "one": {"max_concurrency": 1, "max_queue_length": 64, "max_queue_wait_s": 20},
    # one slot, two places, a short wait: 429 and 503
    "tiny": {"max_concurrency": 1, "max_queue_length": 2, "max_queue_wait_s": 1.0, "retry_after_s": 3},
    # first-token timeout
    "quick": {"max_concurrency": 2, "first_token_timeout_s": 0.7, "request_timeout_s": 5},
}


@pytest.fixture(scope="session")
def shared_gateway(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer, fake_upstream: Server
) -> Iterator[Server]:
    log_dir = tmp_path_factory.mktemp("gateway-logs")
    models = {name: model_config(fake_upstream.url, **dict(limits)) for name, limits in SHARED_MODELS.items()}
    server = launch_gateway(log_dir, _write_config(log_dir / "gateway.yaml", models), redis_server.url, "--auth", "on")
    yield server
    server.stop()


class Gateway:
    """The shared gateway, with helpers to make keys and look into its Redis state."""

    def __init__(self, server: Server, redis_server: RedisServer) -> None:
        self.url = server.url
        self.server = server
        self.redis = redis_server.client()
        self.keyspace = KeySpace()

    def create_key(self, tenant: str = "t1", **fields: Any) -> str:
        r = httpx.post(
            self.url + "/admin/keys",
            json={"tenant": tenant, **fields},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            timeout=5,
        )
        assert r.status_code == 201, r.text
        secret: str = r.json()["api_key"]
        return secret

    def queue_depth(self, model: str) -> int:
        return int(self.redis.zcard(self.keyspace.model(model, []).queue))

    def slots(self, model: str, upstream: str) -> int:
        key = self.keyspace.model(model, [upstream]).slots[0]
        return int(self.redis.zcount(key, int(time.time() * 1000), "+inf"))


@pytest.fixture
def gw(shared_gateway: Server, redis_server: RedisServer, fake: Fake) -> Gateway:
    return Gateway(shared_gateway, redis_server)


def upstream_name(url: str) -> str:
    return url.split("://", 1)[1]


def chat(model: str, user: str = "", max_tokens: int = 3, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}
    if user:
        body["user"] = user
    if stream:
        body["stream"] = True
    return body


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def helpers() -> Any:
    """This module's helpers, for the gateway test modules."""
    return sys.modules[__name__]


def counter(metrics: str, name: str, **labels: str) -> float:
    """One labelled sample of a Prometheus page (0 when the series is absent), labels in their order."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in metrics.splitlines():
        if line.startswith(f"{name}{{") and line.split("}")[0].split("{")[1] == want:
            return float(line.rsplit(" ", 1)[1])
    return 0.0
