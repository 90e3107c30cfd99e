"""The load generator: requests sent at a request rate (Poisson) and/or with at most N in flight.

This is the one load loop of ``genmesh-bench``: every sub-command (``serve``, ``engine``,
``microservice``, ``gateway``, ``report``) sends its requests through :func:`run_load`.
Optionally a second client in the same event loop polls a health URL and records each latency
(the engine's ``/health`` must stay fast while it is saturated).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
from tqdm import tqdm

from .arrivals import arrival_offsets
from .client import Endpoint, RequestOutput, send, session
from .datasets import RequestSpec


@dataclass(frozen=True)
class LoadResult:
    duration_s: float
    outputs: list[RequestOutput]
    health_latencies_s: list[float] = field(default_factory=list)
    health_failures: int = 0

    @property
    def errors(self) -> list[str]:
        return [o.error for o in self.outputs if o.error is not None]

    @property
    def output_tokens(self) -> int:
        return sum(o.output_tokens for o in self.outputs if o.success)

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0


async def _poll_health(
    client: aiohttp.ClientSession, url: str, interval_s: float, stop: asyncio.Event
) -> tuple[list[float], int]:
    latencies: list[float] = []
    failures = 0
    timeout = aiohttp.ClientTimeout(total=10.0)
    while not stop.is_set():
        start = time.perf_counter()
        try:
            async with client.get(url, timeout=timeout) as resp:
                await resp.read()
                ok = resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            ok = False
        elapsed = time.perf_counter() - start
        latencies.append(elapsed)
        failures += not ok
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=max(0.0, interval_s - elapsed))
    return latencies, failures


async def run_load(
    endpoint: Endpoint,
    requests: Sequence[RequestSpec],
    *,
    request_rate: float = math.inf,
    max_concurrency: int | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    progress: bool = False,
    desc: str = "requests",
    health_url: str | None = None,
    health_interval_s: float = 0.02,
) -> LoadResult:
    """Send every request: request ``i`` leaves at its Poisson arrival time, and waits for a free slot
    when ``max_concurrency`` are in flight. ``inf`` rate and no limit sends them all at once.
    The health poller has a connection of its own."""
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError("max_concurrency must be at least 1")
    offsets = arrival_offsets(len(requests), request_rate, burstiness, seed)
    slots = asyncio.Semaphore(max_concurrency or max(1, len(requests)))
    conns = min(len(requests), max_concurrency or len(requests)) + 1
    bar = tqdm(total=len(requests), desc=desc, unit="req", disable=not progress, leave=False)
    async with session(endpoint.base_url, conns) as client:
        stop = asyncio.Event()
        poller = asyncio.create_task(_poll_health(client, health_url, health_interval_s, stop)) if health_url else None
        start = time.perf_counter()

        async def one(req: RequestSpec, at: float) -> RequestOutput:
            delay = at - (time.perf_counter() - start)
            if delay > 0:
                await asyncio.sleep(delay)  # the arrival schedule, not synchronisation
            async with slots:
                out = await send(client, endpoint, req, time.perf_counter() - start)
            bar.update(1)
            return out

        outputs = await asyncio.gather(*(one(r, t) for r, t in zip(requests, offsets, strict=True)))
        duration = time.perf_counter() - start
        stop.set()
        latencies, failures = await poller if poller is not None else ([], 0)
    bar.close()
    return LoadResult(duration, list(outputs), latencies, failures)
