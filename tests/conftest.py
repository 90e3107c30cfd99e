"""Session-wide real servers shared by the test packages."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from genmesh.engine.tokenizer import PromptTokenizer
from support.servers import DEFAULT_MODEL, Server, start_engine


@pytest.fixture(scope="session")
def engine_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The real engine on the real default model, started once per test session."""
    assert DEFAULT_MODEL.is_file(), "run 'make model' first (make test does it)"
    server = start_engine(tmp_path_factory.mktemp("engine-logs"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def engine_url(engine_server: Server) -> str:
    return engine_server.url


@pytest.fixture(scope="session")
def engine_tokenizer() -> PromptTokenizer:
    return PromptTokenizer(DEFAULT_MODEL)
