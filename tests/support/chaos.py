"""Tools of the chaos suite (tests/chaos): clients with deadlines, the engine's in-flight gauge
watched throughout, recovery timed, and every figure kept for the summary ``make chaos`` prints.

Everything here talks to loopback only. ``GENMESH_CHAOS=full`` (``make chaos``) runs the suite
as the issue's "Done when" states it (32 streams, the default 30 s watchdog); otherwise it runs
the fast form that ``make test`` includes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from mesh_supervision import RestartPolicy
from support.mesh import Mesh
from support.polling import until
from support.servers import MODEL_NAME

FULL = os.environ.get("GENMESH_CHAOS", "") == "full"
SLOTS = 32 if FULL else 8  # the gateway's slots on the one upstream: the engine must never hold more
WATCHDOG_S = 30.0 if FULL else 4.0  # the engine's and the gateway's progress timeouts (30 s is the default)
CLIENT_DEADLINE_S = 180.0  # no client may wait longer than this for anything
FIGURES: list[tuple[str, str, float, str]] = []  # scenario, what, value, limit
ADMIN_KEY = "chaos-admin-key"


@dataclass
class Chaos:
    """The session's mesh, its private Redis's data folder, and the API key its clients use."""

    mesh: Mesh
    redis_dir: Path
    key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def gateway(self) -> str:
        return self.mesh.url("gateway")

    @property
    def engine(self) -> str:
        return self.mesh.url("engine")

    @property
    def microservice(self) -> str:
        return self.mesh.url("microservice")


def record(scenario: str, what: str, value: float, limit: str = "") -> float:
    FIGURES.append((scenario, what, value, limit))
    return value


# Streams that outlast every fault scenario (they are cancelled when it ends): the fast form's 8
# streams get ~70 tokens/s each once the engine's API process coalesces its outputs, so 2,000
# tokens ran out mid-scenario; 6,000 x 8 fits the 2 GB KV cache. The full form's 32 streams are
# slower each, and 32 x 6,000 would not fit.
LONG_TOKENS = 2000 if FULL else 6000


def long_body(max_tokens: int = LONG_TOKENS) -> dict[str, Any]:
    return {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": "Tell me a very long story."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }


SHORT = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@dataclass
class StreamResult:
    started: float
    ended: float = 0.0
    status: int | None = None
    chunks: int = 0
    done: bool = False
    error: dict[str, Any] | None = None
    error_at: float | None = None
    failure: str | None = None  # a transport failure (the connection was cut)
    hung: bool = False  # still waiting at its deadline


async def stream_once(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str], res: StreamResult | None = None
) -> StreamResult:
    """One streamed request; ``res`` (updated as chunks arrive, so a caller can watch it) or a new result."""
    res = res if res is not None else StreamResult(time.monotonic())
    try:
        async with asyncio.timeout(CLIENT_DEADLINE_S):
            async with client.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as r:
                res.status = r.status_code
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        res.done = True
                        continue
                    obj = json.loads(line[6:])
                    if "error" in obj:
                        res.error, res.error_at = obj["error"], time.monotonic()
                    else:
                        res.chunks += 1
    except TimeoutError:
        res.hung = True
    except httpx.HTTPError as exc:
        res.failure = type(exc).__name__
    res.ended = time.monotonic()
    return res


def in_flight(metrics_text: str) -> int:
    """Requests in the engine: running plus waiting, from its own gauges."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(("genmesh_engine_requests_running{", "genmesh_engine_requests_waiting{")):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


@dataclass
class GaugeWatch:
    """Samples the engine's in-flight gauge every 50 ms for as long as the scenario runs."""

    engine_url: str
    peak: int = 0
    last: int = 0
    samples: int = 0
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    async def _run(self, client: httpx.AsyncClient) -> None:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                r = await client.get(self.engine_url + "/metrics", timeout=2)
                self.last = in_flight(r.text)
                self.peak = max(self.peak, self.last)
                self.samples += 1
            await asyncio.sleep(0.05)  # the sampling interval (a monitor, not synchronisation)

    def start(self, client: httpx.AsyncClient) -> None:
        self._task = asyncio.create_task(self._run(client))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


@dataclass
class Load:
    """Long streams through the gateway (or another hop) while a fault is injected."""

    client: httpx.AsyncClient
    gauge: GaugeWatch
    tasks: list[asyncio.Task[StreamResult]] = field(default_factory=list)
    live: list[StreamResult] = field(default_factory=list)  # each task's result, as it streams

    def add(self, url: str, n: int, headers: dict[str, str], body: dict[str, Any] | None = None) -> None:
        for _ in range(n):
            self.live.append(res := StreamResult(time.monotonic()))
            self.tasks.append(asyncio.create_task(stream_once(self.client, url, body or long_body(), headers, res)))

    async def fill(self, url: str, n: int, headers: dict[str, str]) -> None:
        """``n`` long streams through ``url``, returning once every one of them streams tokens (the engine's
        gauge alone can still count the previous scenario's streams while the engine aborts them)."""
        self.add(url, n, headers)
        mine = self.live[-n:]
        await until(lambda: all(r.chunks >= 2 for r in mine), 120, f"{n} streams to stream tokens")
        await self.running(n)

    async def running(self, n: int, timeout_s: float = 120) -> None:
        """Wait until the engine holds ``n`` requests (so every stream has reached it)."""
        await until(lambda: self.gauge.last >= n, timeout_s, f"{n} requests in the engine")

    async def results(self, timeout_s: float = CLIENT_DEADLINE_S + 10) -> list[StreamResult]:
        done, _ = await asyncio.wait(self.tasks, timeout=timeout_s)
        assert len(done) == len(self.tasks), "a client outlived its own deadline"
        return [t.result() for t in self.tasks]

    async def cancel(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def load(engine_url: str) -> AsyncIterator[Load]:
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(CLIENT_DEADLINE_S)) as client:
        gauge = GaugeWatch(engine_url)
        gauge.start(client)
        ld = Load(client, gauge)
        try:
            yield ld
        finally:
            await ld.cancel()
            await gauge.stop()


async def serves(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> httpx.Response:
    """One short request (a probe); a transport failure reads as a 599 reply."""
    try:
        return await client.post(url + "/v1/chat/completions", json=SHORT, headers=headers, timeout=30)
    except httpx.HTTPError:
        return httpx.Response(599)


async def until_serving(client: httpx.AsyncClient, url: str, headers: dict[str, str], timeout_s: float) -> float:
    """Probe every 0.2 s until a short request gets 200; return when (monotonic)."""

    async def serving() -> bool:
        status = (await serves(client, url, headers)).status_code
        assert status != 401, "the API key was lost"
        return status == 200

    return await until(serving, timeout_s, f"{url} to serve", 0.2)


async def new_key(client: httpx.AsyncClient, gateway: str) -> str:
    """An API key made through the admin endpoint (503 while Redis is away: asked again)."""
    made: list[str] = []

    async def make() -> bool:
        r = await client.post(
            gateway + "/admin/keys", json={"tenant": "chaos"}, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        )
        if r.status_code == 201:
            made.append(r.json()["api_key"])
        return bool(made)

    await until(make, 30, "an API key from the admin endpoint", 0.2)
    return made[0]


def others_untouched(before: dict[str, int], after: dict[str, int], killed: str) -> None:
    """The killed component has a new process; every other one still has its old process."""
    assert after[killed] != before[killed], f"{killed} was not restarted"
    assert {k: v for k, v in after.items() if k != killed} == {k: v for k, v in before.items() if k != killed}


async def settled(mesh: Mesh, name: str) -> None:
    """Wait until the launcher's child ``name`` has run the launcher's stable period, so that its next
    death counts as a first one again: restarted after the first back-off (1 s), not after the one
    that deaths in a row double up to its cap (30 s). A scenario that kills a process many times
    leaves the mesh so for the next."""
    stable_s = RestartPolicy().stable_s + 1.0  # the launcher polls its children: a little past it
    proc = mesh.process(name)
    await until(lambda: time.time() - proc.create_time() >= stable_s, stable_s + 10, f"{name} up {stable_s:g} s", 0.5)
