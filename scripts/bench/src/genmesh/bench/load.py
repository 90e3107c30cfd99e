"""The load generator: OpenAI-compatible requests timed as vLLM's ``benchmark_serving`` times them, tokens
counted from the final ``usage`` chunk (each engine's own count). aiohttp, as vLLM's: 32 streams cost httpx with
httpx-sse 2.9 s of CPU for 4,096 chunks on the cores the server needs, aiohttp 0.96 s, and on uvloop with orjson
11 % less again. Every server measured sends an event as one ``data:`` line, so lines are read."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import httpx
import numpy as np
import orjson
from tqdm import tqdm

from .datasets import RequestSpec
from .results import Load, RequestOutput, Result, StealMeter, make_result, percentile

REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=600.0, connect=10.0)


@dataclass(frozen=True)
class Endpoint:
    """Where and how requests go: ``{base_url}{prefix}/chat/completions`` or ``.../completions``."""

    base_url: str
    model: str | None = None
    api: Literal["chat", "completions"] = "chat"
    prefix: str = "/v1"
    stream: bool = True
    ignore_eos: bool = True

    @property
    def path(self) -> str:
        return f"{self.prefix}/chat/completions" if self.api == "chat" else f"{self.prefix}/completions"

    def body(self, req: RequestSpec) -> dict[str, Any]:
        body: dict[str, Any] = {"max_tokens": req.output_len, "temperature": 0.0}
        body |= {} if self.model is None else {"model": self.model}
        if self.api == "chat":
            system = [{"role": "system", "content": req.system}] if req.system else []
            body["messages"] = [*system, {"role": "user", "content": req.prompt}]
        else:
            body["prompt"] = f"{req.system}\n\n{req.prompt}" if req.system else req.prompt
        body |= {"ignore_eos": True} if self.ignore_eos else {}
        return body | ({"stream": True, "stream_options": {"include_usage": True}} if self.stream else {})


def session(base_url: str, connections: int) -> aiohttp.ClientSession:
    """The load generator's session: ``connections`` keep-alive connections to ``base_url``."""
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=connections)
    return aiohttp.ClientSession(base_url=base_url, connector=connector, timeout=REQUEST_TIMEOUT)


@dataclass
class ClosedLoop:
    """What a closed loop measured: each served request's latency (s), the refused ones, its length (s)."""

    latencies: list[float]
    failed: int
    elapsed_s: float
    units: float = 0.0  # what the served requests carried (``closed_loop``'s ``units``; default: 1 each)

    def summary(self, rate: str, per_request: int = 1) -> dict[str, float]:
        """``rate``: the served items per second (``per_request`` items a request), with p50/p99 latency."""
        return {
            rate: len(self.latencies) * per_request / self.elapsed_s,
            "p50_ms": 1000 * (percentile(self.latencies, 50) or 0.0),
            "p99_ms": 1000 * (percentile(self.latencies, 99) or 0.0),
            "failed": self.failed,
        }


def form_data(fields: dict[str, Any]) -> aiohttp.FormData:
    """A multipart form: ``bytes`` values as files (``audio.wav``), the others as text fields."""
    form = aiohttp.FormData()
    for name, value in fields.items():
        if isinstance(value, bytes):
            form.add_field(name, value, filename="audio.wav", content_type="audio/wav")
        else:
            form.add_field(name, str(value))
    return form


async def closed_loop(
    url: str,
    path: str,
    body: Callable[[int, int], dict[str, Any]],
    concurrency: int,
    duration_s: float,
    *,
    form: bool = False,
    units: Callable[[int, int], float] | None = None,
) -> ClosedLoop:
    """``concurrency`` clients, each posting its next request to ``path`` as soon as the last is answered,
    for ``duration_s``: client ``k``'s ``n``-th served request sends ``body(k, n)`` (as JSON, or with
    ``form`` as a multipart form) and carries ``units(k, n)`` (default 1: see :attr:`ClosedLoop.units`);
    one answered with another status than 200 counts as failed (and is sent again)."""
    latencies: list[float] = []
    failed, carried = 0, 0.0
    async with session(url, concurrency) as http:
        stop = time.monotonic() + duration_s

        async def client(k: int) -> None:
            nonlocal failed, carried
            n = 0
            while time.monotonic() < stop:
                sent = body(k, n)
                started = time.perf_counter()
                async with http.post(path, **({"data": form_data(sent)} if form else {"json": sent})) as r:
                    await r.read()
                    if r.status != 200:
                        failed += 1
                        continue
                latencies.append(time.perf_counter() - started)
                carried += 1.0 if units is None else units(k, n)
                n += 1

        began = time.monotonic()
        await asyncio.gather(*(client(k) for k in range(concurrency)))
        elapsed = time.monotonic() - began
    return ClosedLoop(latencies, failed, elapsed, carried)


async def _stream(resp: aiohttp.ClientResponse, start: float, out: RequestOutput) -> None:
    last, usage_seen, done = start, False, False
    async for line in resp.content:  # to the body's end, past [DONE], so the connection is kept for the next request
        if done or not line.startswith(b"data:"):
            continue  # blank separators, ``event:``/``id:`` fields, ``:`` comments
        if (data := line[5:].strip()) == b"[DONE]":
            done = True
            continue
        chunk = orjson.loads(data)
        if "error" in chunk:
            raise RuntimeError(f"stream error: {chunk['error']}")
        now = time.perf_counter()
        deltas = [c.get("delta") if isinstance(c.get("delta"), dict) else c for c in chunk.get("choices") or ()]
        if any(d.get("content") or d.get("reasoning_content") or d.get("text") for d in deltas):
            if out.ttft_s is None:
                out.ttft_s = now - start
            else:
                out.itl_s.append(now - last)
            last = now
        usage_seen = out.usage(chunk.get("usage")) or usage_seen
    if not usage_seen:
        raise RuntimeError("the stream carried no usage (stream_options.include_usage)")


async def send(client: aiohttp.ClientSession, endpoint: Endpoint, req: RequestSpec) -> RequestOutput:
    """Send one request; never raises for a failed request (``success`` False, ``error`` says why)."""
    out, start, answered = RequestOutput(), time.perf_counter(), False

    async def post(via: aiohttp.ClientSession) -> None:
        nonlocal answered
        async with via.post(endpoint.path, json=endpoint.body(req)) as resp:
            answered = True
            if (waited := resp.headers.get("x-queue-wait-ms", "")).isdigit():
                out.queue_wait_s = int(waited) / 1000.0
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:300]}")
            if endpoint.stream:
                await _stream(resp, start, out)
            elif not out.usage(orjson.loads(await resp.read()).get("usage")):
                raise RuntimeError("the response carried no usage")

    try:
        try:
            await post(client)
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
            # A pooled keep-alive connection the server had closed (llama-server's cpp-httplib does so
            # between requests): no response began, so the request is sent once more (HTTP/1.1, RFC 9112
            # 9.3.1) on a connection of its own (the pool may hold more stale ones), timed from the first try.
            if answered:
                raise
            connector = aiohttp.TCPConnector(force_close=True)
            async with aiohttp.ClientSession(endpoint.base_url, connector=connector, timeout=REQUEST_TIMEOUT) as fresh:
                await post(fresh)
        out.success = True
    except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    out.e2e_s = time.perf_counter() - start
    out.ttft_s = out.e2e_s if out.success and not endpoint.stream else out.ttft_s
    return out


async def served_model(base_url: str, prefix: str = "/v1") -> str:
    """The first model id the server lists at ``/v1/models``."""
    async with httpx.AsyncClient(base_url=base_url, timeout=10.0) as client:
        resp = await client.get(f"{prefix}/models")
        resp.raise_for_status()
        return str(resp.json()["data"][0]["id"])


def arrival_offsets(n: int, request_rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """When each of ``n`` requests leaves, as vLLM's benchmark sends them: gamma gaps of mean ``1 /
    request_rate`` and shape ``burstiness`` (1: Poisson, below 1 burstier); ``inf``: all at once."""
    if n < 0 or request_rate <= 0 or burstiness <= 0:
        raise ValueError("n must not be negative, request_rate and burstiness must be positive")
    if math.isinf(request_rate):
        return [0.0] * n
    gaps = np.random.default_rng(seed).gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=n)
    gaps[:1] = 0.0  # the first request goes at once
    return [float(t) for t in np.cumsum(gaps)]


def load_levels(concurrency: Sequence[int], rates: Sequence[float], rate_requests: int, per_slot: int = 2) -> list[Any]:
    """(request rate, max concurrency, requests) of each level: closed loops of ``c`` in flight sending
    max(4, ``per_slot`` x c) requests, then ``rate_requests`` at each Poisson rate."""
    return [(math.inf, c, max(4, per_slot * c)) for c in concurrency] + [(r, None, rate_requests) for r in rates]


async def _poll(client: aiohttp.ClientSession, url: str, interval_s: float, stop: asyncio.Event) -> Load:
    """GET ``url`` every ``interval_s`` until ``stop``: each latency, and how many were not 200."""
    latencies, failures = [], 0
    while not stop.is_set():
        start = time.perf_counter()
        try:
            async with client.get(url, timeout=aiohttp.ClientTimeout(total=10.0)) as resp:
                await resp.read()
                ok = resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            ok = False
        latencies.append(elapsed := time.perf_counter() - start)
        failures += not ok
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=max(0.0, interval_s - elapsed))
    return Load(0.0, [], latencies, failures)


async def measure(
    endpoint: Endpoint,
    requests: Sequence[RequestSpec],
    *,
    label: str = "requests",
    warmup: Sequence[RequestSpec] = (),
    pids: Sequence[int] = (),
    slos: dict[str, float] | None = None,
    settings: dict[str, Any] | None = None,
    request_rate: float = math.inf,
    max_concurrency: int | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    progress: bool = False,
    health_url: str | None = None,
    health_interval_s: float = 0.02,
) -> Result:
    """The one load loop: after ``warmup`` (not measured), request ``i`` leaves at its arrival time, waits
    while ``max_concurrency`` are in flight, under a :class:`.results.StealMeter` (``pids``: the servers);
    a second client may poll ``health_url`` (the engine's ``/health`` must stay fast meanwhile)."""
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError("max_concurrency must be at least 1")
    if warmup:
        await measure(endpoint, warmup, max_concurrency=max_concurrency)
    offsets = arrival_offsets(len(requests), request_rate, burstiness, seed)
    slots = asyncio.Semaphore(max_concurrency or max(1, len(requests)))
    bar = tqdm(total=len(requests), desc=label, unit="req", disable=not progress, leave=False)
    with StealMeter([os.getpid(), *pids]) as meter:
        async with session(endpoint.base_url, min(len(requests), max_concurrency or len(requests)) + 1) as client:
            stop = asyncio.Event()
            poller = asyncio.create_task(_poll(client, health_url, health_interval_s, stop)) if health_url else None
            start = time.perf_counter()

            async def one(req: RequestSpec, at: float) -> RequestOutput:
                if (delay := at - (time.perf_counter() - start)) > 0:
                    await asyncio.sleep(delay)  # the arrival schedule, not synchronisation
                async with slots:
                    out = await send(client, endpoint, req)
                bar.update(1)
                return out

            outputs = await asyncio.gather(*(one(r, t) for r, t in zip(requests, offsets, strict=True)))
            duration = time.perf_counter() - start
            stop.set()
            health = await poller if poller is not None else Load(0.0, [])
    bar.close()
    run: dict[str, Any] = {"base_url": endpoint.base_url, "api": endpoint.api, "num_prompts": len(requests)}
    run |= {"request_rate": None if math.isinf(request_rate) else request_rate, "burstiness": burstiness}
    run |= {"max_concurrency": max_concurrency, "ignore_eos": endpoint.ignore_eos, "model_id": endpoint.model}
    run |= {"max_tokens": sorted({r.output_len for r in requests}), **(settings or {})}
    load = Load(duration, list(outputs), health.health_s, health.health_failures)
    return make_result(label, load, meter, slos=slos, settings=run)
