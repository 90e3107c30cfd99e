"""What tracing costs the gateway (``genmesh-bench gateway --mode tracing``).

Three gateways on one fake upstream, each with its own Redis: tracing off; tracing on at 100 %
sampling (``OTEL_TRACES_SAMPLER=always_on``) exporting to a collector that accepts everything (an
OTLP/HTTP sink, ``python -m genmesh.bench.tracing_cost --sink PORT``); tracing on with the collector
down (its endpoint a closed port). Rounds are interleaved (off, up, down, off, up, down, ...): each
round measures throughput with ``--clients`` keep-alive clients and latency one request at a time.
Reported: the median of the rounds per configuration, and its ratio to tracing off, and the
gateway's CPU seconds per request in the throughput rounds (its process's user + system time: robust
on a shared machine, where throughput is not), and apart from it its span exporter's (the child process
that makes and encodes the SDK's spans), since that CPU is spent on another core, not nowhere.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil

from .hops import FAKE_UPSTREAM, admitted, keepalive_load
from .results import make_result
from .servers import PORT, free_port, start, start_gateway

CONFIGS = ("off", "on_collector_up", "on_collector_down")


def _env(config: str, sink_url: str, closed_url: str) -> dict[str, str]:
    if config == "off":
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ""}
    endpoint = sink_url if config == "on_collector_up" else closed_url
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_SAMPLER": "always_on"}


def run(args: argparse.Namespace, log_dir: Path, say: Any) -> dict[str, Any]:
    import asyncio

    rounds: dict[str, list[dict[str, float]]] = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        argv = [sys.executable, str(FAKE_UPSTREAM), "--port", PORT, "--delay-ms", str(args.upstream_delay_ms)]
        upstream = stack.enter_context(start("fake-upstream", argv, log_dir / "tracing-upstream.log", 30.0))
        sink = stack.enter_context(
            start(
                "otlp-sink",
                [sys.executable, "-m", "genmesh.bench.tracing_cost", "--sink", PORT],
                log_dir / "sink.log",
                30.0,
            )
        )
        closed = f"http://127.0.0.1:{free_port()}"
        route = {"url": upstream.url, "health_path": "/health", "max_concurrency": args.max_concurrency}
        ports, procs = {}, {}
        for config in CONFIGS:
            gw, _ = start_gateway(
                stack, Path(tmp), route, log_dir, "bench", prefix=f"tracing-{config}-", **_env(config, sink.url, closed)
            )
            ports[config] = int(gw.url.rsplit(":", 1)[1])
            procs[config] = psutil.Process(gw.proc.pid)
            asyncio.run(keepalive_load(ports[config], args.clients, args.clients * 4))  # warm
        for i in range(args.passes):
            for config in CONFIGS:
                cpu_before, exporter_before = _cpu_s(procs[config]), _exporter_cpu_s(procs[config])
                load = asyncio.run(keepalive_load(ports[config], args.clients, args.requests))
                cpu_ms = 1000 * (_cpu_s(procs[config]) - cpu_before) / args.requests
                exporter_ms = 1000 * (_exporter_cpu_s(procs[config]) - exporter_before) / args.requests
                single = asyncio.run(keepalive_load(ports[config], 1, max(20, args.requests // 20)))
                ok = [o.e2e_s for o in single.outputs if o.success]
                errors = sum(not o.success for o in load.outputs + single.outputs)
                rounds[config].append(
                    {
                        "req_per_s": admitted(make_result(config, load, None)),
                        "latency_p50_ms": 1000 * statistics.median(ok) if ok else float("nan"),
                        "gateway_cpu_ms_per_request": cpu_ms,
                        "exporter_cpu_ms_per_request": exporter_ms,
                        "errors": errors,
                    }
                )
                rps = rounds[config][-1]["req_per_s"]
                say(
                    f"tracing round {i + 1}/{args.passes} {config}: {rps:.0f} req/s, gateway CPU {cpu_ms:.3f} ms/req"
                    f" (+ span exporter {exporter_ms:.3f})"
                )
        exports = _exports(sink.url)
    summary: dict[str, Any] = {}
    for config in CONFIGS:
        rps = statistics.median(r["req_per_s"] for r in rounds[config])
        p50 = statistics.median(r["latency_p50_ms"] for r in rounds[config])
        cpu = statistics.median(r["gateway_cpu_ms_per_request"] for r in rounds[config])
        exporter = statistics.median(r["exporter_cpu_ms_per_request"] for r in rounds[config])
        summary[config] = {
            "req_per_s": rps,
            "latency_p50_ms": p50,
            "gateway_cpu_ms_per_request": cpu,
            "exporter_cpu_ms_per_request": exporter,
            "errors": sum(r["errors"] for r in rounds[config]),
        }
    base = summary["off"]
    for config in CONFIGS[1:]:
        summary[config]["throughput_vs_off"] = summary[config]["req_per_s"] / base["req_per_s"]
        summary[config]["added_latency_ms"] = summary[config]["latency_p50_ms"] - base["latency_p50_ms"]
        cpu_ms = summary[config]["gateway_cpu_ms_per_request"]
        summary[config]["cpu_vs_off"] = cpu_ms / base["gateway_cpu_ms_per_request"]
        with_exporter = cpu_ms + summary[config]["exporter_cpu_ms_per_request"]
        summary[config]["cpu_with_exporter_vs_off"] = with_exporter / base["gateway_cpu_ms_per_request"]
    # the collector got spans (a benchmark whose "on" gateways did not trace would measure nothing)
    summary["on_collector_up"]["exports_received"] = exports
    return {"configs": summary, "rounds": rounds, "clients": args.clients, "requests": args.requests}


def _cpu_s(proc: psutil.Process) -> float:
    """The process's CPU seconds so far (user + system, its threads included)."""
    times = proc.cpu_times()
    return float(times.user + times.system)


def _exporter_cpu_s(proc: psutil.Process) -> float:
    """CPU seconds so far of the gateway's child processes: its span exporter when tracing is on."""
    total = 0.0
    for child in proc.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += _cpu_s(child)
    return total


def _exports(sink_url: str) -> int:
    import httpx

    return int(httpx.get(sink_url + "/health", timeout=5).json()["exports"])


def sink(port: int) -> None:
    """An OTLP/HTTP collector that accepts every export and keeps nothing (the benchmark's "collector up")."""
    from aiohttp import web

    exports = 0

    async def accept(request: web.Request) -> web.Response:
        nonlocal exports
        await request.read()
        exports += 1
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"exports": exports})

    app = web.Application()
    app.router.add_post("/v1/traces", accept)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sink", type=int, required=True, help="serve the OTLP sink on this port")
    sink(parser.parse_args().sink)
