"""A client that goes away aborts its generation: the engine's running gauge drops to 0."""

from __future__ import annotations

import asyncio
import contextlib

import httpx

from support.polling import until, wait_until
from support.servers import metric_value

LONG = {"prompt": "Write a very long story.", "max_tokens": 4000, "ignore_eos": True, "temperature": 0}


def running(url: str) -> float:
    return metric_value(url, "genmesh_engine_requests_running")


def test_streaming_client_disconnect_aborts(engine_url: str) -> None:
    wait_until(lambda: running(engine_url) == 0, 60, what="idle engine")
    with httpx.stream("POST", engine_url + "/v1/completions", json={**LONG, "stream": True}, timeout=60) as r:
        lines = r.iter_lines()
        got = 0
        for line in lines:
            if line.startswith("data: "):
                got += 1
            if got >= 3:
                break
        assert running(engine_url) == 1
    # response closed: the connection is gone
    wait_until(lambda: running(engine_url) == 0, 10, what="running gauge back to 0 after disconnect")
    tokens = metric_value(engine_url, "genmesh_engine_generation_tokens_total")
    assert tokens > 0


async def test_unary_client_disconnect_aborts(engine_url: str) -> None:
    await until(lambda: running(engine_url) == 0, 60, "idle engine")
    async with httpx.AsyncClient(timeout=60) as client:
        task = asyncio.create_task(client.post(engine_url + "/v1/completions", json=LONG))
        await until(lambda: running(engine_url) >= 1, 30, "the request to start")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await until(lambda: running(engine_url) == 0, 10, "running gauge back to 0 after unary disconnect")


def test_engine_still_serves_after_cancellations(engine_url: str) -> None:
    r = httpx.post(engine_url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 5}, timeout=60)
    assert r.status_code == 200
    assert r.json()["usage"]["completion_tokens"] > 0
