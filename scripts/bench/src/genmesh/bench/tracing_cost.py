"""What tracing costs the gateway (``genmesh-bench gateway --mode tracing``).

Four configurations of a gateway on one fake upstream, each with its own Redis: tracing off; tracing
on at 100 % sampling (``OTEL_TRACES_SAMPLER=always_on``) exporting to a collector that accepts
everything (an OTLP/HTTP sink, ``python -m genmesh.bench.tracing_cost --sink PORT``); tracing on with
the collector down (its endpoint a closed port); and tracing off again, a second gateway (the A/A
control: how far two identical gateways differ is the noise floor of every ratio). Rounds are
interleaved (off, up, down, control, off, ...), each on a freshly started gateway and Redis (one
process's memory layout moves its speed by a few per cent; fresh processes average that out): a round
measures throughput with ``--clients`` keep-alive clients, then latency one request at a time.
Reported: per configuration the median of its rounds and the ratio to tracing off, the gateway's CPU
per request in the throughput rounds (its process's user + system time: robust on a shared machine,
where throughput is not), and apart from it its span exporter's (the child process that makes and
encodes the SDK's spans): that CPU is spent on another core, not nowhere.
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

# "off_control": a second tracing-off gateway, the A/A control: its ratio to "off" is the noise floor
CONFIGS = ("off", "on_collector_up", "on_collector_down", "off_control")


def _env(config: str, sink_url: str, closed_url: str) -> dict[str, str]:
    if config.startswith("off"):
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
        for i in range(args.passes):
            for config in CONFIGS:
                # a fresh gateway (and Redis) per round: one process's memory layout and hash seed move
                # its CPU per request by several per cent, which the median over rounds then evens out
                with contextlib.ExitStack() as round_stack:
                    gw, _ = start_gateway(
                        round_stack,
                        Path(tmp),
                        route,
                        log_dir,
                        "bench",
                        prefix=f"tracing-{config}-{i}-",
                        **_env(config, sink.url, closed),
                    )
                    port, proc = int(gw.url.rsplit(":", 1)[1]), psutil.Process(gw.proc.pid)
                    asyncio.run(keepalive_load(port, args.clients, max(args.clients * 4, args.requests // 10)))  # warm
                    rounds[config].append(_round(args, port, proc))
                rps, cpu_ms = rounds[config][-1]["req_per_s"], rounds[config][-1]["gateway_cpu_ms_per_request"]
                exporter_ms = rounds[config][-1]["exporter_cpu_ms_per_request"]
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


def _round(args: argparse.Namespace, port: int, proc: psutil.Process) -> dict[str, float]:
    """One round on one gateway: throughput with ``args.clients`` clients (its CPU per request, and its
    span exporter's), then latency one request at a time."""
    import asyncio

    cpu_before, exporter_before = _cpu_s(proc), _exporter_cpu_s(proc)
    load = asyncio.run(keepalive_load(port, args.clients, args.requests))
    cpu_ms = 1000 * (_cpu_s(proc) - cpu_before) / args.requests
    exporter_ms = 1000 * (_exporter_cpu_s(proc) - exporter_before) / args.requests
    single = asyncio.run(keepalive_load(port, 1, max(20, args.requests // 20)))
    ok = [o.e2e_s for o in single.outputs if o.success]
    return {
        "req_per_s": admitted(make_result("round", load, None)),
        "latency_p50_ms": 1000 * statistics.median(ok) if ok else float("nan"),
        "gateway_cpu_ms_per_request": cpu_ms,
        "exporter_cpu_ms_per_request": exporter_ms,
        "errors": sum(not o.success for o in load.outputs + single.outputs),
    }


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
