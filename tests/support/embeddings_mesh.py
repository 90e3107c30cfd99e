"""The whole mesh for embeddings tests: gateway (auth on) -> microservice -> the real engine serving
the chat model and all-MiniLM-L6-v2 side by side, each model on gateway slots of its own."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from support.gateway_helpers import ADMIN_KEY, RedisServer, launch_gateway, model_config, private_redis
from support.hostile import start_microservice
from support.servers import EMBEDDING_NAME, MODEL_NAME, Server

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@dataclass
class Mesh:
    gateway: Server
    microservice: Server
    redis: RedisServer

    def key(self, **limits: Any) -> tuple[str, str]:
        r = httpx.post(self.gateway.url + "/admin/keys", json={"tenant": "rag", **limits}, headers=ADMIN, timeout=5)
        assert r.status_code == 201, r.text
        return r.json()["api_key"], r.json()["key_id"]

    def client(self, secret: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.url + "/v1", api_key=secret, max_retries=0)


def both_models(microservice_url: str) -> dict[str, Any]:
    """The gateway's routes to the microservice: the chat and the embedding model, slots of their own."""
    upstreams = [{"url": microservice_url, "max_concurrency": 2, "health_path": "/v1/health_check"}]
    return {
        MODEL_NAME: model_config(microservice_url, upstreams=upstreams),
        EMBEDDING_NAME: model_config(microservice_url, upstreams=upstreams, kind="embeddings"),
    }


@pytest.fixture(scope="session")
def embeddings_mesh(embedding_engine_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """Gateway (auth on) -> microservice -> the engine serving the chat and the embedding model.

    On a Redis of its own: every gateway runs a batch runner, and the suite's other session gateways
    (shared_gateway) route only the chat model, so on a shared Redis they would claim this mesh's
    embeddings batch lines and fail them."""
    redis_gen = private_redis(tmp_path_factory)
    redis_server = next(redis_gen)
    logs: Path = tmp_path_factory.mktemp("embeddings-mesh")
    ms = start_microservice(logs, embedding_engine_url)
    config = logs / "gateway.yaml"
    config.write_text(yaml.safe_dump({"models": both_models(ms.url)}))
    gw = launch_gateway(logs, config, redis_server.url, "--auth", "on")
    yield Mesh(gw, ms, redis_server)
    gw.stop()
    ms.stop()
    next(redis_gen, None)  # stops the server
