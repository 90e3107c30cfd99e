"""A deliberately tiny KV cache: concurrent long requests all finish (preemption), one that can
never fit fails at once with a reason, and the scheduler log line reports cache usage."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.polling import wait_until
from support.servers import GENMESH_ENGINE_ONLY, Server, start_engine

pytestmark = [GENMESH_ENGINE_ONLY, pytest.mark.slow]

# CPU KV blocks hold 32 tokens: 24 blocks = 768 tokens for everyone at once.
BLOCKS = 24


@pytest.fixture(scope="module")
def tiny_cache_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_engine(
        tmp_path_factory.mktemp("kv"), "--num-kv-blocks", str(BLOCKS), "--stats-log-interval-s", "0.5"
    )
    yield server
    server.stop()


async def test_many_long_requests_all_finish(tiny_cache_engine: Server) -> None:
    prompt = "Write a long essay about the history of the sea. " * 6  # ~70 tokens
    body = {"prompt": prompt, "max_tokens": 160, "ignore_eos": True, "temperature": 0}
    async with httpx.AsyncClient(base_url=tiny_cache_engine.url, timeout=300) as client:
        replies = await asyncio.gather(*(client.post("/v1/completions", json=body) for _ in range(8)))
    # 8 x ~230 tokens is more than twice the cache: requests wait or get preempted, none is lost.
    assert [r.status_code for r in replies] == [200] * 8, [r.text for r in replies if r.status_code != 200]
    assert all(r.json()["usage"]["completion_tokens"] == 160 for r in replies)
    assert all(r.json()["choices"][0]["finish_reason"] == "length" for r in replies)


def test_a_request_larger_than_the_cache_fails_cleanly(tiny_cache_engine: Server) -> None:
    body = {"prompt": "word " * 900, "max_tokens": 10}
    r = httpx.post(tiny_cache_engine.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 400, r.text
    assert "KV cache" in r.json()["error"]["message"]
    ok = httpx.post(tiny_cache_engine.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 3}, timeout=60)
    assert ok.status_code == 200


def test_scheduler_log_line_reports_cache_usage(tiny_cache_engine: Server) -> None:
    def logged() -> bool:
        text = Path(tiny_cache_engine.log_path).read_text(errors="replace")
        return "All requests:" in text and "Scheduled requests:" in text and "Cache usage" in text

    httpx.post(tiny_cache_engine.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 30}, timeout=60)
    wait_until(logged, 10, what="the OVMS-style scheduler line")
    assert "genmesh_engine_kv_cache_usage" in httpx.get(tiny_cache_engine.url + "/metrics").text
