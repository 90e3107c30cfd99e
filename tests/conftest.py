"""Session-wide real servers shared by the test packages."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from genmesh.engine.tokenizer import PromptTokenizer
from support.servers import DEFAULT_MODEL, EXTERNAL_ENGINE_URL, start_engine


@pytest.fixture(scope="session")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real engine on the real default model, started once per test session."""
    if EXTERNAL_ENGINE_URL:
        yield EXTERNAL_ENGINE_URL
        return
    assert DEFAULT_MODEL.is_file(), "run 'make model' first (make test does it)"
    server = start_engine(tmp_path_factory.mktemp("engine-logs"))
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def engine_tokenizer() -> PromptTokenizer:
    return PromptTokenizer(DEFAULT_MODEL)
