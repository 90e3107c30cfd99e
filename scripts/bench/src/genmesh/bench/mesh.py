"""The mesh under test: engine, then microservice, private Redis and gateway in front of it, as subprocesses."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from .server import ManagedServer, start_engine, start_gateway, start_microservice, start_redis
from .workload import Scheduler

MODEL_NAME = "SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class Mesh:
    engine: ManagedServer | None
    engine_url: str
    microservice: ManagedServer | None = None
    gateway: ManagedServer | None = None

    @property
    def microservice_url(self) -> str | None:
        return self.microservice.url if self.microservice else None

    @property
    def gateway_url(self) -> str | None:
        return self.gateway.url if self.gateway else None


def redis_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise FileNotFoundError("redis-server not found: run 'make redis' (scripts/ensure_redis.sh install)")
    return binary


def write_gateway_config(
    path: Path, model_name: str, upstream_url: str, health_path: str, max_concurrency: int
) -> Path:
    upstream = {"url": upstream_url, "health_path": health_path, "max_concurrency": max_concurrency}
    path.write_text(yaml.safe_dump({"models": {model_name: {"upstreams": [upstream], "max_queue_length": 100000}}}))
    return path


@contextmanager
def running_mesh(
    model: str,
    scheduler: Scheduler,
    log_dir: Path,
    *,
    engine_url: str | None = None,
    microservice: bool = True,
    gateway: bool = True,
    gateway_slots: int = 64,
    model_name: str = MODEL_NAME,
) -> Iterator[Mesh]:
    """Start what is asked for (``engine_url`` uses a running engine instead) and stop it all afterwards."""
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        engine = None
        if engine_url is None:
            engine = start_engine(model, scheduler, log_dir / "engine.log", extra=("--served-model-name", model_name))
            stack.callback(engine.stop)
            engine_url = engine.url
        ms = None
        if microservice or gateway:
            ms = start_microservice(engine_url, log_dir / "microservice.log")
            stack.callback(ms.stop)
        gw = None
        if gateway and ms is not None:
            redis = start_redis(redis_binary(), Path(tmp), log_dir / "redis.log")
            stack.callback(redis.stop)
            cfg = write_gateway_config(
                Path(tmp) / "gateway.yaml", model_name, ms.url, "/v1/health_check", gateway_slots
            )
            gw = start_gateway(cfg, redis.url, log_dir / "gateway.log")
            stack.callback(gw.stop)
        yield Mesh(engine, engine_url, ms if microservice else None, gw)
