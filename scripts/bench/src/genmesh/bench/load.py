"""An async streaming load client: N concurrent chat requests, with ``/health`` polled alongside.

Each request records its time to first token (first chunk carrying content), its end-to-end
time and its completion tokens from the final ``usage`` chunk. A separate client in the same
event loop polls ``GET /health`` every ``health_interval_s`` and records each latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from .workload import Workload

REQUEST_TIMEOUT = httpx.Timeout(600.0, connect=10.0)


@dataclass(frozen=True)
class RequestResult:
    e2e_s: float
    ttft_s: float | None
    completion_tokens: int
    content_chunks: int
    error: str | None = None


@dataclass(frozen=True)
class LoadResult:
    wall_s: float
    requests: list[RequestResult]
    health_latencies_s: list[float] = field(default_factory=list)
    health_failures: int = 0

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.requests)

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self.requests if r.error is not None]

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else 0.0


async def served_model(base_url: str) -> str:
    """The first model id the server lists at ``/v1/models``."""
    async with httpx.AsyncClient(base_url=base_url, timeout=10.0) as client:
        resp = await client.get("/v1/models")
        resp.raise_for_status()
        return str(resp.json()["data"][0]["id"])


async def _one(client: httpx.AsyncClient, body: dict[str, Any]) -> RequestResult:
    start = time.perf_counter()
    ttft: float | None = None
    tokens = 0
    chunks = 0
    try:
        async with aconnect_sse(client, "POST", "/v1/chat/completions", json=body) as source:
            source.response.raise_for_status()
            async for event in source.aiter_sse():
                if event.data == "[DONE]":
                    break
                chunk = json.loads(event.data)
                if "error" in chunk:
                    raise RuntimeError(str(chunk["error"]))
                for choice in chunk.get("choices") or ():
                    if (choice.get("delta") or {}).get("content"):
                        chunks += 1
                        if ttft is None:
                            ttft = time.perf_counter() - start
                usage = chunk.get("usage")
                if usage:
                    tokens = int(usage["completion_tokens"])
    except (httpx.HTTPError, RuntimeError, ValueError) as exc:
        return RequestResult(time.perf_counter() - start, ttft, tokens, chunks, f"{type(exc).__name__}: {exc}")
    if tokens == 0:
        return RequestResult(time.perf_counter() - start, ttft, 0, chunks, "no usage chunk in the stream")
    return RequestResult(time.perf_counter() - start, ttft, tokens, chunks)


async def _poll_health(base_url: str, interval_s: float, stop: asyncio.Event) -> tuple[list[float], int]:
    latencies: list[float] = []
    failures = 0
    async with httpx.AsyncClient(base_url=base_url, timeout=10.0) as client:
        while not stop.is_set():
            start = time.perf_counter()
            try:
                ok = (await client.get("/health")).status_code == 200
            except httpx.HTTPError:
                ok = False
            elapsed = time.perf_counter() - start
            latencies.append(elapsed)
            failures += not ok
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, interval_s - elapsed))
    return latencies, failures


async def run_load(
    base_url: str,
    model: str,
    prompts: Sequence[str],
    max_tokens: int,
    workload: Workload,
    health_interval_s: float | None = 0.02,
) -> LoadResult:
    """Send all ``prompts`` at once as streaming chat requests; poll ``/health`` meanwhile unless disabled."""
    limits = httpx.Limits(max_connections=len(prompts) + 1, max_keepalive_connections=len(prompts) + 1)
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT, limits=limits) as client:
        stop = asyncio.Event()
        poller = (
            asyncio.create_task(_poll_health(base_url, health_interval_s, stop))
            if health_interval_s is not None
            else None
        )
        start = time.perf_counter()
        results = await asyncio.gather(*(_one(client, workload.chat_body(model, p, max_tokens)) for p in prompts))
        wall = time.perf_counter() - start
        stop.set()
        latencies, failures = await poller if poller is not None else ([], 0)
    return LoadResult(wall, list(results), latencies, failures)
