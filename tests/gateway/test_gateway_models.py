"""Several models through the mesh: the gateway routes each ``model`` to its own upstream (here
the int8 export through a microservice, the GGUF straight to the engine, one engine serving
both), the microservice passes the name through, and every reply names the model that made it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.exports import GGUF_NAME, IR_NAME
from support.gateway_helpers import RedisServer, StartGateway, model_config
from support.servers import GENMESH_ENGINE_ONLY, Server, free_port, start_server

pytestmark = GENMESH_ENGINE_ONLY  # it starts a genmesh engine of two models


@pytest.fixture(scope="module")
def microservice(two_models: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = free_port()
    argv = [sys.executable, "-m", "genmesh.microservice", "--llm-endpoint", two_models.url, "--port", str(port)]
    log_dir: Path = tmp_path_factory.mktemp("models-microservice")
    server = start_server(
        "microservice", argv, port, log_dir, health_path="/v1/health_check", env={"OPENAI_API_KEY": ""}
    )
    yield server
    server.stop()


def chat(url: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=120)


def test_each_model_has_its_own_route_and_name(
    start_gateway: StartGateway, redis_server: RedisServer, microservice: Server, two_models: Server
) -> None:
    routes = {
        IR_NAME: model_config(microservice.url, upstreams=[{"url": microservice.url, "health_path": "/v1/ready"}]),
        GGUF_NAME: model_config(two_models.url, upstreams=[{"url": two_models.url, "health_path": "/health"}]),
    }
    gateway = start_gateway(routes)
    for name in (IR_NAME, GGUF_NAME):
        r = chat(gateway.url, name)
        assert r.status_code == 200, r.text
        assert r.json()["model"] == name
        assert r.json()["choices"][0]["message"]["content"]
    models = {m["id"] for m in httpx.get(gateway.url + "/v1/models", timeout=10).json()["data"]}
    assert {IR_NAME, GGUF_NAME} <= models
    unknown = chat(gateway.url, "smol-int4")
    assert unknown.status_code == 404
    assert set(unknown.json()["error"]) == {"message", "type", "param", "code"}
    # the microservice passes any name through: the engine behind it serves both, and says which
    direct = chat(microservice.url, GGUF_NAME)
    assert (direct.status_code, direct.json()["model"]) == (200, GGUF_NAME)
    missing = chat(microservice.url, "smol-int4")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
