"""Session-wide real servers shared by the test packages."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from genmesh.engine.tokenizer import PromptTokenizer
from support.exports import run_export
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


@pytest.fixture(scope="session")
def int8_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default model exported to int8 IR by the real genmesh-export: ``repo/smol-int8`` and
    ``repo/config.json`` (graph: 1 GB KV cache). The engine's GGUF cache keeps the fp16 IR and
    the compressed model, so only a fresh machine pays the whole export."""
    repo = tmp_path_factory.mktemp("ir-repo")
    started = time.monotonic()
    done = run_export(repo, "smol-int8", "--weight-format", "int8", "--cache_size", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"\n[int8 export: {time.monotonic() - started:.1f} s]")
    return repo / "smol-int8"
