"""Session-wide real servers shared by the test packages."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from genmesh.engine.openai.prompts import PromptTokenizer
from support.exports import GGUF_NAME, IR_NAME, run_export
from support.servers import (
    DEFAULT_MODEL,
    EMBEDDING_MODEL,
    EXTERNAL_ENGINE_URL,
    Server,
    start_engine,
    start_repository_engine,
)

# Fixtures shared across packages, registered once for the whole suite: Redis, the fake upstream and
# gateway processes (tests/gateway, tests/e2e, tests/hostile).
pytest_plugins = ["support.gateway_helpers", "support.embeddings_mesh", "support.audio"]


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
def embedding_engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real engine serving the default chat model and the real embedding model (all-MiniLM-L6-v2)
    side by side, started once per test session."""
    assert (EMBEDDING_MODEL / "model.safetensors").is_file(), "run 'make model' first (make test does it)"
    server = start_engine(tmp_path_factory.mktemp("embedding-engine-logs"), "--embedding-model", str(EMBEDDING_MODEL))
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def engine_tokenizer() -> PromptTokenizer:
    return PromptTokenizer(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def int8_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default model exported to int8 IR by the real genmesh-export: ``repo/smol-int8`` and
    ``repo/config.json`` (graph: 1 GB KV cache). The engine's GGUF cache keeps the fp16 IR and
    the compressed model, so only a fresh machine pays the whole export."""
    repo = tmp_path_factory.mktemp("ir-repo")
    started = time.monotonic()
    done = run_export(repo, IR_NAME, "--weight-format", "int8", "--cache_size", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"\n[int8 export: {time.monotonic() - started:.1f} s]")
    return repo / IR_NAME


@pytest.fixture(scope="session")
def two_models(int8_export: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One engine serving an OVMS config.json of two models: the int8 export and the GGUF it came
    from (each with its engine core), once both have loaded or failed to."""
    root = int8_export.parent
    (root / "gguf").mkdir()
    (root / "gguf" / "model.gguf").symlink_to(DEFAULT_MODEL)
    config = root / "two-models.json"
    entries = [{"name": IR_NAME, "base_path": IR_NAME}, {"name": GGUF_NAME, "base_path": "gguf"}]
    config.write_text(json.dumps({"mediapipe_config_list": entries}))
    server = start_repository_engine(config, tmp_path_factory.mktemp("two-models"))
    yield server
    server.stop()
