"""``genmesh-bench microservice`` and ``gateway`` (docs/benchmarking.md): what each hop costs. The queue
mode sends with a minimal keep-alive client: on 2 cores the general one, not the gateway, set the
pace. ``--upstream-delay-ms 5 --max-concurrency 4`` keeps the pool full, so requests wait in the
Redis queue (330-390 req/s here, against the upstream's own ceiling of 800)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import psutil

from genmesh.engine.settings import DEFAULT_MODEL

from .compare import alternate, compare_hop, keep_quiet, rounded
from .datasets import RequestSpec, chat_batch
from .load import Endpoint, measure, send, session
from .render import fmt, say
from .results import Load, RequestOutput, Result, StealMeter, make_result, percentile, save
from .servers import MODEL_NAME, PORT, running_mesh, start, start_gateway

MICROSERVICE_TARGETS = (0.97, 5.0)  # throughput ratio at least, added TTFT p50 ms at most (issue 4)
GATEWAY_TARGETS = (0.95, 10.0)
TARGET_QUEUE_REQ_S = 1000.0
FAKE_UPSTREAM = Path("tests/support/fake_upstream.py")  # the gateway tests' upstream double (run from the repo root)


async def idle_ttfts(targets: Mapping[str, Endpoint], n: int, max_tokens: int) -> dict[str, list[float]]:
    """TTFT (ms) of ``n`` requests to each target in turn, one at a time: a hop's own latency."""
    out: dict[str, list[float]] = {name: [] for name in targets}
    async with contextlib.AsyncExitStack() as stack:  # a keep-alive connection per target, as real clients keep
        clients = {name: await stack.enter_async_context(session(e.base_url, 1)) for name, e in targets.items()}
        for req in chat_batch(n, max_tokens):
            for name, endpoint in targets.items():
                if (ttft := (await send(clients[name], endpoint, req)).ttft_s) is not None:
                    out[name].append(ttft * 1000.0)
    return out


def _mesh_args(g: argparse._ActionsContainer, max_tokens: int, rounds: int) -> None:
    g.add_argument("--model", default=DEFAULT_MODEL, help="GGUF file or IR folder for the engine")
    g.add_argument("--streams", type=int, default=32, help="streams per batch (default 32)")
    g.add_argument("--max-tokens", type=int, default=max_tokens, help=f"new tokens per stream (default {max_tokens})")
    g.add_argument("--rounds", type=int, default=rounds, help="batches per target, alternating which goes first")
    g.add_argument("--idle-requests", type=int, default=16, help="requests per target sent one at a time afterwards")


def ms_args(p: argparse.ArgumentParser) -> None:
    _mesh_args(p, 64, 6)
    p.add_argument("--log-dir", type=Path, default=Path("bench-results/microservice"), help="logs of started servers")
    p.add_argument("--json", dest="json_out", type=Path, help="also write the summary to this JSON file")


def _hop(hop: str, args: argparse.Namespace, with_microservice: bool = False) -> Result:
    """In a mesh of its own: rounds of a batch through ``hop`` and straight to the engine (and the microservice),
    each warmed up with 4 short requests, then one at a time (``cpu_s``: each one's process tree)."""
    batch, slots, gw = chat_batch(args.streams, args.max_tokens), max(args.streams, 32), hop == "gateway"
    warm = [RequestSpec(r.prompt, 0, 8) for r in batch[:4]]
    with running_mesh(args.model, Path(args.log_dir), gateway=gw, gateway_slots=slots) as m:
        hops = [s for s in (m.microservice, m.gateway) if s and (s.name == hop or with_microservice)]
        targets = {s.name: Endpoint(s.url, MODEL_NAME) for s in [*hops, m.engine]}

        def target(name: str) -> Callable[[int], Awaitable[Result]]:
            async def run(r: int) -> Result:
                warmup, settings = [] if r else warm, {"target": name}
                return await measure(targets[name], batch, label=name, warmup=warmup, pids=m.pids, settings=settings)

            return run

        rounds = asyncio.run(alternate({name: target(name) for name in targets}, args.rounds))
        idle = asyncio.run(idle_ttfts(targets, args.idle_requests, args.max_tokens))
    summary = compare_hop(rounds, hop, idle, GATEWAY_TARGETS if gw else MICROSERVICE_TARGETS)
    tokens, cpu_s = summary[hop]["tokens"], summary[hop]["cpu_s"]
    summary[f"{hop}_cpu_ms_per_token"] = 1000 * cpu_s / tokens if cpu_s and tokens else None
    return {"streams": len(batch), "max_tokens": args.max_tokens, "rounds": args.rounds, **summary, "batches": rounds}


def microservice(args: argparse.Namespace) -> int:
    summary = _hop("microservice", args)
    batches = summary.pop("batches")
    print(json.dumps(summary, indent=2))
    out = args.json_out or args.log_dir / time.strftime("microservice-%Y%m%d-%H%M%S.json")
    print(f"results: {save({'summary': summary, 'batches': batches}, out)}")
    return 1 if summary["engine"]["errors"] or summary["microservice"]["errors"] else 0


def gateway_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mode",
        choices=["queue", "mesh", "all", "tracing"],
        default="all",
        help="tracing: the queue mode's load with tracing off / on (collector up) / on (collector down), interleaved",
    )
    p.add_argument("--log-dir", default="bench-results/gateway", help="logs of the servers this starts")
    p.add_argument("--json", dest="json_out", type=Path, help="also write the results to this JSON file")
    g = p.add_argument_group("queue mode")
    g.add_argument("--clients", type=int, default=64, help="requests in flight from the client (default 64)")
    g.add_argument("--max-concurrency", type=int, default=16, help="the upstream's slots (default 16)")
    g.add_argument("--requests", type=int, default=3000, help="unary requests per pass (default 3000)")
    g.add_argument("--upstream-delay-ms", type=float, default=0.0, help="the fake upstream's time per request")
    g.add_argument("--passes", type=int, default=5, help="measured passes; the median is judged (default 5)")
    g.add_argument(
        "--consoles",
        type=int,
        default=0,
        help="also run each pass with this many open consoles (polling /console/status each second), "
        "interleaved with passes without, and time the status endpoint (default 0: off)",
    )
    m = p.add_argument_group("mesh mode")
    _mesh_args(m, 128, 4)
    m.add_argument("--with-microservice", action="store_true", help="also stream straight to the microservice")


def gateway(args: argparse.Namespace) -> int:
    if args.mode in ("mesh", "all") and not Path(args.model).is_file():
        print(f"mesh mode needs the model {args.model}: run 'make model'", file=sys.stderr)
        return 2
    results: dict[str, Any] = {}
    try:
        if args.mode == "tracing":
            from . import tracing_cost

            doc = tracing_cost.run(args, Path(args.log_dir), say)
            print(json.dumps(doc["configs"], indent=2))
            if args.json_out:
                save(doc, args.json_out)
            return 1 if any(c["errors"] for c in doc["configs"].values()) else 0
        if args.mode in ("queue", "all"):
            results["queue"] = gateway_queue(args)
        if args.mode in ("mesh", "all"):
            results["mesh"] = _hop("gateway", args, args.with_microservice)
            del results["mesh"]["batches"]
    except FileNotFoundError as exc:  # no redis-server
        print(exc, file=sys.stderr)
        return 2
    doc = results if args.mode == "all" else results[args.mode]
    print(json.dumps(doc, indent=2))
    if args.json_out:
        save(doc, args.json_out)
    queue, mesh = results.get("queue", {"errors": 0, "targets_met": {}}), results.get("mesh")
    failed = queue["errors"] or not all(queue["targets_met"].values())
    return 1 if failed or (mesh and (mesh["engine"]["errors"] or mesh["gateway"]["errors"])) else 0


def gateway_queue(args: argparse.Namespace) -> Result:
    log_dir, passes, slots = Path(args.log_dir), list[Result](), args.max_concurrency
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        argv = [sys.executable, str(FAKE_UPSTREAM), "--port", PORT, "--delay-ms", str(args.upstream_delay_ms)]
        upstream = stack.enter_context(start("fake-upstream", argv, log_dir / "queue-upstream.log", 30.0))
        route = {"url": upstream.url, "health_path": "/health", "max_concurrency": slots}
        gw, redis = start_gateway(stack, Path(tmp), route, log_dir, "bench", prefix="queue-")
        port = int(gw.url.rsplit(":", 1)[1])
        asyncio.run(keepalive_load(port, args.clients, min(args.requests, args.clients * 4)))
        httpx.post(upstream.url + "/control", json={"reset": True}, timeout=5).raise_for_status()
        if args.consoles:
            return console_overhead(args, gw.url, port, gw.proc.pid)
        for i in range(args.passes):
            with StealMeter([gw.proc.pid, redis.proc.pid]) as steal:
                load = asyncio.run(keepalive_load(port, args.clients, args.requests))
            passes.append(make_result("queue", load, steal))
            done = f"{admitted(passes[-1]):.0f} req/s, steal {fmt(steal.steal_percent)}%"
            say(f"queue pass {i + 1}/{args.passes}: {done}")
        in_flight = httpx.get(upstream.url + "/stats", timeout=5).json()["max_in_flight"]
    kept = keep_quiet({"queue": passes}, noun="passes")
    rate = statistics.median(admitted(r) for r in kept.of(passes))
    latencies = [x for r in kept.of(passes) for x in r["e2els_ms"]]
    report = {"clients": args.clients, "max_concurrency": slots, "upstream_delay_ms": args.upstream_delay_ms}
    each = [{"admitted_per_s": round(admitted(p), 1), "cpu_steal_pct": rounded(p["steal_percent"], 1)} for p in passes]
    report |= {"requests_per_pass": args.requests, "passes": each, "judged_on": f"median of {kept.basis}"}
    report["errors"] = sum(r["failed"] for r in passes)
    report |= {"admitted_per_s": round(rate, 1), "latency_ms_p50": rounded(percentile(latencies, 50))}
    report |= {"latency_ms_p99": rounded(percentile(latencies, 99)), "upstream_max_in_flight": in_flight}
    return report | {
        "targets": {"admitted_per_s": f">= {TARGET_QUEUE_REQ_S:g}", "upstream_max_in_flight": f"<= {slots}"},
        "targets_met": {"admitted_per_s": rate >= TARGET_QUEUE_REQ_S, "upstream_max_in_flight": in_flight <= slots},
    }


CONSOLE_SETTLE_S = 6.5  # after the consoles close: the gateway's viewed marker lapses (5 s) and its loop goes idle


async def _poll_status(url: str, consoles: int, stop: Any, ready: Any) -> None:
    """``consoles`` viewers each polling ``/console/status`` once a second, as the page does, until ``stop``;
    ``ready`` once each has had its first answer."""
    started = [0]

    async def viewer(client: httpx.AsyncClient, offset_s: float) -> None:
        await asyncio.sleep(offset_s)
        while not stop.is_set():
            (await client.get(url + "/console/status")).raise_for_status()
            started[0] += 1
            if started[0] == consoles:
                ready.set()
            await asyncio.sleep(1.0)

    async with httpx.AsyncClient(timeout=10) as client:
        await asyncio.gather(*(viewer(client, i / max(consoles, 1)) for i in range(consoles)))


def _viewers_main(url: str, consoles: int, stop: Any, ready: Any) -> None:
    asyncio.run(_poll_status(url, consoles, stop, ready))


@contextlib.contextmanager
def open_consoles(url: str, consoles: int) -> Iterator[None]:
    """``consoles`` open consoles in a process of their own (as browsers are: not on the load's event loop);
    after they close, waits until the gateway stops computing for them."""
    ctx = multiprocessing.get_context("spawn")
    stop, ready = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_viewers_main, args=(url, consoles, stop, ready), daemon=True)
    proc.start()
    try:
        if not ready.wait(60):  # started (its imports done) and polling before the load begins
            raise RuntimeError("the consoles did not start polling in 60 s")
        yield
    finally:
        stop.set()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
        time.sleep(CONSOLE_SETTLE_S)


def idle_cpu(url: str, pid: int, consoles: int, seconds: float = 10.0, rounds: int = 2) -> dict[str, float]:
    """The idle gateway's CPU ms per second with ``consoles`` open and with none (interleaved rounds, medians)."""
    proc, out = psutil.Process(pid), {"none": list[float](), "consoles": list[float]()}
    for i in range(rounds):
        for name in ("none", "consoles") if i % 2 == 0 else ("consoles", "none"):
            with open_consoles(url, consoles) if name == "consoles" else contextlib.nullcontext():
                time.sleep(2.0)  # the consoles' first computation and the loops settled
                cpu0, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
                time.sleep(seconds)
                out[name].append(1000 * (sum(proc.cpu_times()[:2]) - cpu0) / (time.monotonic() - t0))
    return {k: round(statistics.median(v), 1) for k, v in out.items()}


def status_cost(url: str, pid: int, calls: int = 300) -> dict[str, Any]:
    """The status endpoint served ``calls`` times in a row: client latency, and the gateway's CPU per call."""
    proc = psutil.Process(pid)
    latencies = []
    with httpx.Client(timeout=10) as client:
        client.get(url + "/console/status").raise_for_status()
        cpu0 = sum(proc.cpu_times()[:2])
        for _ in range(calls):
            t0 = time.perf_counter()
            client.get(url + "/console/status").raise_for_status()
            latencies.append((time.perf_counter() - t0) * 1000)
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        compute_ms = client.get(url + "/console/status").json()["compute_ms"]
    return {
        "calls": calls,
        "latency_ms_p50": rounded(percentile(latencies, 50), 3),
        "latency_ms_p99": rounded(percentile(latencies, 99), 3),
        "gateway_cpu_ms_per_call": round(cpu * 1000 / calls, 3),
        "snapshot_compute_ms": compute_ms,
    }


def console_overhead(args: argparse.Namespace, url: str, port: int, pid: int) -> Result:
    """Interleaved passes with ``args.consoles`` open consoles and with none (alternating which goes first):
    the ratio of the medians of admitted req/s, the gateway's CPU per request (robust to a shared machine)
    and per second idle in both cases, and the status endpoint's cost per call."""
    proc = psutil.Process(pid)
    rates: dict[str, list[float]] = {"none": [], "consoles": []}
    cpu_ms: dict[str, list[float]] = {"none": [], "consoles": []}
    for i in range(args.passes):
        order = ("none", "consoles") if i % 2 == 0 else ("consoles", "none")
        for name in order:
            with open_consoles(url, args.consoles) if name == "consoles" else contextlib.nullcontext():
                cpu0 = sum(proc.cpu_times()[:2])
                result = make_result(name, asyncio.run(keepalive_load(port, args.clients, args.requests)), None)
                cpu = sum(proc.cpu_times()[:2]) - cpu0
            rates[name].append(admitted(result))
            cpu_ms[name].append(1000 * cpu / max(1, result["completed"] + result["failed"]))
        say(f"console pass {i + 1}/{args.passes}: " + ", ".join(f"{k} {v[-1]:.0f} req/s" for k, v in rates.items()))
    none, with_ = statistics.median(rates["none"]), statistics.median(rates["consoles"])
    cpu_none, cpu_with = statistics.median(cpu_ms["none"]), statistics.median(cpu_ms["consoles"])
    return {
        "consoles": args.consoles,
        "clients": args.clients,
        "requests_per_pass": args.requests,
        "admitted_per_s": {k: [round(x, 1) for x in v] for k, v in rates.items()},
        "median_admitted_per_s": {"none": round(none, 1), "consoles": round(with_, 1)},
        "ratio_consoles_vs_none": round(with_ / none, 4) if none else None,
        "gateway_cpu_ms_per_request": {"none": round(cpu_none, 4), "consoles": round(cpu_with, 4)},
        "ratio_cpu_per_request_consoles_vs_none": round(cpu_with / cpu_none, 4) if cpu_none else None,
        "idle_gateway_cpu_ms_per_s": idle_cpu(url, pid, args.consoles),
        "status_endpoint": status_cost(url, pid),
        "errors": 0,
        "targets": {"ratio_consoles_vs_none": ">= 0.98"},
        "targets_met": {"ratio_consoles_vs_none": bool(none) and with_ / none >= 0.98},
    }


def admitted(result: Result) -> float:
    """Requests admitted per second: every answered request, one with an error status too."""
    return float(result["completed"] + result["failed"]) / result["duration_s"] if result["duration_s"] else 0.0


async def _read_response(reader: asyncio.StreamReader) -> int:
    """Just enough of one response (status, headers, body by length or chunks) to send the next."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
    if "transfer-encoding: chunked" not in head:
        await reader.readexactly(int(m[1]) if (m := re.search(r"content-length:\s*(\d+)", head)) else 0)
    else:
        while size := int((await reader.readline()).strip(), 16):
            await reader.readexactly(size + 2)
        await reader.readexactly(2)
    return int(head.split()[1])


async def keepalive_load(port: int, clients: int, requests: int, model: str = "bench") -> Load:
    """``requests`` unary chat requests, each written whole on one of ``clients`` keep-alive connections."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode()
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    request, todo, outputs = (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body, requests, []

    async def connection() -> None:
        nonlocal todo
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while todo > 0:
                todo, t0 = todo - 1, time.perf_counter()
                writer.write(request)
                ok = (status := await _read_response(reader)) == 200
                error = None if ok else f"HTTP {status}"
                outputs.append(RequestOutput(ok, e2e_s=time.perf_counter() - t0, error=error))
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(clients)))
    return Load(time.perf_counter() - t0, outputs)
