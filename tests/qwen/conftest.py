"""``make test-qwen`` (GENMESH_QWEN=1): tool calls and speculative decoding on Qwen2.5-Coder 1.5B
(``make model-qwen``). Never collected by ``make test``: the 1.5B takes minutes to load on 2 cores."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from support.qwen import start_qwen
from support.servers import Server

collect_ignore_glob = [] if os.environ.get("GENMESH_QWEN") == "1" else ["test_*.py"]
QWEN_TEST_TIMEOUT_S = 3600  # a test's time includes its fixtures': 1.5B loads of minutes each


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/qwen/" in str(item.path):
            item.add_marker(pytest.mark.timeout(QWEN_TEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The 1.5B with vLLM's flags for Hermes tool calls (its template renders ``tools`` itself)."""
    server = start_qwen(tmp_path_factory.mktemp("qwen"), "--tool-call-parser", "hermes", "--enable-auto-tool-choice")
    yield server
    server.stop()
