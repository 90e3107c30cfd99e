"""Microservices for the tests: one in front of the session's real engine, and a factory for others."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.servers import MODEL_NAME, Server, free_port, start_server

StartMicroservice = Callable[..., Server]


def _start(log_dir: Path, llm_endpoint: str, *extra: str) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "genmesh.microservice", "--llm-endpoint", llm_endpoint, "--port", str(port), *extra]
    # The developer's own OpenAI key must not be sent to test engines.
    return start_server("microservice", argv, port, log_dir, health_path="/v1/health_check", env={"OPENAI_API_KEY": ""})


@pytest.fixture(scope="session")
def microservice_server(engine_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = _start(tmp_path_factory.mktemp("microservice-logs"), engine_url, "--model-id", MODEL_NAME)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def microservice_url(microservice_server: Server) -> str:
    return microservice_server.url


@pytest.fixture
def start_microservice(tmp_path: Path) -> Iterator[StartMicroservice]:
    """``start_microservice(llm_endpoint, *flags)``: a microservice of the test's own, stopped after it."""
    started: list[Server] = []

    def start(llm_endpoint: str, *extra: str) -> Server:
        server = _start(tmp_path, llm_endpoint, *extra)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
