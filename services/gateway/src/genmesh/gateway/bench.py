"""``python -m genmesh.gateway.bench``: what the gateway costs, in two measurements.

``--mode queue``: queue-mechanics throughput of one gateway process. Starts a private
``redis-server``, the fake upstream (no delay) and one gateway (auth off), then drives
``--clients`` keep-alive connections of unary chat requests for ``--seconds`` at a pool of
``--max-concurrency`` slots, so that requests beyond it wait in Redis and are woken by pub/sub.
Reports admitted requests/s, latency percentiles, the upstream's peak concurrency (must not
exceed the limit) and CPU steal over the run.

``--mode mesh``: ``--streams`` concurrent chat streams (``ignore_eos``, ``--max-tokens``,
temperature 0, usage from the final chunk) through gateway -> llm-microservice -> engine vs
straight to the engine, in one run: ``--rounds`` batches per target, alternating which goes
first so that machine noise lands on both. Reports output-token throughput and its ratio
(target >= 0.95), TTFT p50/p99 of each and what the gateway path adds (target p50 <= 10 ms at an
idle queue), with CPU steal from ``/proc/stat`` per batch. Starts the engine, the microservice,
a private Redis and the gateway as subprocesses (needs the engine and microservice packages, as
in the development venv).

``--mode all`` (the default, ``make bench-gateway``) runs both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _steal() -> tuple[int, int]:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields]
    return values[7] if len(values) > 7 else 0, sum(values)


def _wait_http(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} never answered")


async def _client(host: str, port: int, body: bytes, stop_at: float, lat: list[float], errors: list[int]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    try:
        while time.monotonic() < stop_at:
            t0 = time.perf_counter()
            writer.write(head + body)
            status_line = await reader.readline()
            status = int(status_line.split()[1])
            chunked, length = False, 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                k, _, v = line.decode().partition(":")
                if k.lower() == "transfer-encoding" and "chunked" in v:
                    chunked = True
                elif k.lower() == "content-length":
                    length = int(v)
            if chunked:
                while True:
                    size = int((await reader.readline()).strip(), 16)
                    await reader.readexactly(size + 2)
                    if size == 0:
                        break
            else:
                await reader.readexactly(length)
            lat.append(time.perf_counter() - t0)
            if status != 200:
                errors.append(status)
    finally:
        writer.close()


async def _load(port: int, clients: int, seconds: float) -> tuple[list[float], list[int], float]:
    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode()
    lat: list[float] = []
    errors: list[int] = []
    t0 = time.monotonic()
    stop_at = t0 + seconds
    await asyncio.gather(*(_client("127.0.0.1", port, body, stop_at, lat, errors) for _ in range(clients)))
    return lat, errors, time.monotonic() - t0


def _start_redis(binary: str, tmp: str) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--save", "", "--dir", tmp], stdout=subprocess.DEVNULL)
    return proc, port


def _gateway_argv(cfg: Path, port: int, redis_port: int) -> list[str]:
    argv = [sys.executable, "-m", "genmesh.gateway", "--config", str(cfg), "--port", str(port)]
    return [*argv, "--redis-url", f"redis://127.0.0.1:{redis_port}/0", "--auth", "off", "--log-level", "warning"]


@contextmanager
def _processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def run_queue(ns: argparse.Namespace, binary: str) -> tuple[dict[str, object], bool]:
    with tempfile.TemporaryDirectory() as tmp, _processes() as procs:
        redis_proc, rport = _start_redis(binary, tmp)
        procs.append(redis_proc)
        fport, gport = _free_port(), _free_port()
        procs.append(subprocess.Popen([sys.executable, "-m", "genmesh.gateway.fake_upstream", "--port", str(fport)]))
        cfg = Path(tmp) / "bench.yaml"
        route = {"upstreams": [{"url": f"http://127.0.0.1:{fport}", "max_concurrency": ns.max_concurrency}]}
        cfg.write_text(yaml.safe_dump({"models": {"bench": {**route, "max_queue_length": 100000}}}))
        procs.append(subprocess.Popen(_gateway_argv(cfg, gport, rport)))
        _wait_http(f"http://127.0.0.1:{fport}/health")
        _wait_http(f"http://127.0.0.1:{gport}/ready")
        asyncio.run(_load(gport, ns.clients, ns.warmup_s))
        httpx.post(f"http://127.0.0.1:{fport}/control", json={"reset": True})
        s0, t0 = _steal()
        lat, errors, wall = asyncio.run(_load(gport, ns.clients, ns.seconds))
        s1, t1 = _steal()
        stats = httpx.get(f"http://127.0.0.1:{fport}/stats").json()
    lat.sort()
    n = len(lat)
    report: dict[str, object] = {
        "clients": ns.clients,
        "max_concurrency": ns.max_concurrency,
        "requests": n,
        "errors": len(errors),
        "admitted_per_s": round(n / wall, 1),
        "latency_ms_p50": round(1000 * statistics.median(lat), 2) if lat else None,
        "latency_ms_p99": round(1000 * lat[int(0.99 * (n - 1))], 2) if lat else None,
        "upstream_max_in_flight": stats["max_in_flight"],
        "cpu_steal_pct": round(100 * (s1 - s0) / max(1, t1 - t0), 1),
    }
    return report, not errors and stats["max_in_flight"] <= ns.max_concurrency


# -- mesh: streams through gateway -> microservice -> engine vs engine direct ------------------------


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


async def _stream(client: httpx.AsyncClient, url: str, body: dict[str, object]) -> tuple[float | None, int]:
    """(seconds to the first generated text, completion tokens from the final usage chunk)."""
    started = time.perf_counter()
    ttft: float | None = None
    tokens = 0
    async with client.stream("POST", url, json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError(chunk["error"].get("message", "stream error"))
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
            choices = chunk.get("choices") or []
            if ttft is None and choices and (choices[0].get("delta") or {}).get("content"):
                ttft = time.perf_counter() - started
    return ttft, tokens


@dataclass
class _Batch:
    wall_s: float
    tokens: int
    ttfts: list[float]
    errors: int
    steal: float


async def _batch(client: httpx.AsyncClient, base_url: str, streams: int, max_tokens: int) -> _Batch:
    bodies = [
        {
            "messages": [{"role": "user", "content": f"Write a short story about a robot, number {i}."}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        for i in range(streams)
    ]
    s0, t0 = _steal()
    started = time.perf_counter()
    results = await asyncio.gather(
        *(_stream(client, base_url + "/v1/chat/completions", b) for b in bodies), return_exceptions=True
    )
    wall = time.perf_counter() - started
    s1, t1 = _steal()
    ok = [r for r in results if not isinstance(r, BaseException)]
    return _Batch(
        wall_s=wall,
        tokens=sum(tok for _, tok in ok),
        ttfts=[t for t, _ in ok if t is not None],
        errors=len(results) - len(ok),
        steal=(s1 - s0) / max(1, t1 - t0),
    )


async def _mesh_rounds(targets: dict[str, str], ns: argparse.Namespace) -> dict[str, list[_Batch]]:
    out: dict[str, list[_Batch]] = {name: [] for name in targets}
    limits = httpx.Limits(max_connections=ns.streams * 2, max_keepalive_connections=ns.streams * 2)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600, connect=10), limits=limits) as client:
        for url in targets.values():  # warm-up: connections, engine caches
            await _batch(client, url, min(ns.streams, 4), 8)
        names = list(targets)
        for r in range(ns.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                batch = await _batch(client, targets[name], ns.streams, ns.max_tokens)
                out[name].append(batch)
                print(
                    f"round {r + 1} {name:8s} {batch.tokens} tokens in {batch.wall_s:.2f}s "
                    f"errors={batch.errors} steal={100 * batch.steal:.1f}%",
                    file=sys.stderr,
                )
    return out


def _wait_proc_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} never answered")


def run_mesh(ns: argparse.Namespace, binary: str) -> tuple[dict[str, object], bool]:
    log_dir = Path(ns.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, _processes() as procs:
        eport, mport, gport = _free_port(), _free_port(), _free_port()
        engine_url, ms_url, gw_url = (f"http://127.0.0.1:{p}" for p in (eport, mport, gport))

        def start(argv: list[str], log: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
            with (log_dir / log).open("wb") as f:
                proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env)
            procs.append(proc)
            return proc

        engine = start(
            [sys.executable, "-m", "genmesh.engine", "--model", ns.model, "--port", str(eport)], "bench-engine.log"
        )
        redis_proc, rport = _start_redis(binary, tmp)
        procs.append(redis_proc)
        _wait_proc_http(engine_url + "/health", engine, 300)
        ms = start(
            [sys.executable, "-m", "genmesh.microservice", "--port", str(mport), "--log-level", "warning"],
            "bench-microservice.log",
            env={**os.environ, "LLM_ENDPOINT": engine_url},
        )
        _wait_proc_http(ms_url + "/v1/health_check", ms, 60)
        cfg = Path(tmp) / "mesh.yaml"
        upstream = {"url": ms_url, "health_path": "/v1/health_check", "max_concurrency": max(ns.streams, 32)}
        cfg.write_text(yaml.safe_dump({"models": {ns.model_name: {"upstreams": [upstream]}}}))
        gw = start(_gateway_argv(cfg, gport, rport), "bench-gateway.log")
        _wait_proc_http(gw_url + "/ready", gw, 60)
        targets = {"engine": engine_url, "gateway": gw_url}
        if ns.with_microservice:
            targets["microservice"] = ms_url  # to tell the microservice hop from the gateway's
        batches = asyncio.run(_mesh_rounds(targets, ns))

    def totals(name: str) -> dict[str, float]:
        bs = batches[name]
        wall = sum(b.wall_s for b in bs)
        tokens = sum(b.tokens for b in bs)
        ttfts = [t for b in bs for t in b.ttfts]
        return {
            "tokens_per_s": tokens / wall if wall else 0.0,
            "ttft_ms_p50": 1000 * _percentile(ttfts, 50),
            "ttft_ms_p99": 1000 * _percentile(ttfts, 99),
            "errors": sum(b.errors for b in bs),
            "steal_pct": 100 * statistics.mean(b.steal for b in bs),
        }

    eng, gwt = totals("engine"), totals("gateway")
    ratio = gwt["tokens_per_s"] / eng["tokens_per_s"] if eng["tokens_per_s"] else 0.0
    report: dict[str, object] = {
        "streams": ns.streams,
        "max_tokens": ns.max_tokens,
        "rounds": ns.rounds,
        "engine": {k: round(v, 2) for k, v in eng.items()},
        "gateway_path": {k: round(v, 2) for k, v in gwt.items()},
        "throughput_ratio": round(ratio, 3),
        "added_ttft_ms_p50": round(gwt["ttft_ms_p50"] - eng["ttft_ms_p50"], 2),
        "added_ttft_ms_p99": round(gwt["ttft_ms_p99"] - eng["ttft_ms_p99"], 2),
        "cpu_steal_pct": round((eng["steal_pct"] + gwt["steal_pct"]) / 2, 1),
        **(
            {"microservice_path": {k: round(v, 2) for k, v in totals("microservice").items()}}
            if ns.with_microservice
            else {}
        ),
        "targets": {"throughput_ratio": ">= 0.95", "added_ttft_ms_p50": "<= 10"},
    }
    return report, eng["errors"] == 0 and gwt["errors"] == 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m genmesh.gateway.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--mode", choices=["queue", "mesh", "all"], default="all")
    g = p.add_argument_group("queue mode")
    g.add_argument("--clients", type=int, default=64)
    g.add_argument("--max-concurrency", type=int, default=16)
    g.add_argument("--seconds", type=float, default=10.0)
    g.add_argument("--warmup-s", type=float, default=2.0)
    m = p.add_argument_group("mesh mode")
    m.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf", help="GGUF file for the engine")
    m.add_argument("--model-name", default="SmolLM2-135M-Instruct", help="model name routed by the gateway")
    m.add_argument("--streams", type=int, default=32)
    m.add_argument("--max-tokens", type=int, default=128)
    m.add_argument("--rounds", type=int, default=4, help="batches per target, alternating which goes first")
    m.add_argument("--with-microservice", action="store_true", help="also stream straight to the microservice")
    m.add_argument("--log-dir", default="bench-results/gateway", help="logs of the servers mesh mode starts")
    ns = p.parse_args(argv)
    binary = shutil.which("redis-server")
    if binary is None:
        print("redis-server not found: run scripts/ensure_redis.sh install", file=sys.stderr)
        return 2
    ok = True
    results: dict[str, object] = {}
    if ns.mode in ("queue", "all"):
        results["queue"], good = run_queue(ns, binary)
        ok = ok and good
    if ns.mode in ("mesh", "all"):
        if not Path(ns.model).is_file():
            print(f"mesh mode needs the model {ns.model}: run 'make model'", file=sys.stderr)
            return 2
        results["mesh"], good = run_mesh(ns, binary)
        ok = ok and good
    print(json.dumps(results if ns.mode == "all" else next(iter(results.values())), indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
