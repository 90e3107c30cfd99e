"""``genmesh-bench microservice`` and ``gateway`` (README: Benchmarks): what each hop costs. The queue
mode sends with a minimal keep-alive client: on 2 cores the general one, not the gateway, set the
pace. ``--upstream-delay-ms 5 --max-concurrency 4`` keeps the pool full, so requests wait in the
Redis queue (330-390 req/s here, against the upstream's own ceiling of 800)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from genmesh.engine.settings import DEFAULT_MODEL

from .compare import ADDED, alternate, compare_hop, difference, keep_quiet, rounded
from .datasets import RequestSpec, chat_batch
from .load import Endpoint, measure, send, served_model, session
from .render import fmt, say
from .results import Load, RequestOutput, Result, StealMeter, cpu_seconds, make_result, percentile, save
from .servers import MODEL_NAME, running_mesh, start_fake_upstream, start_gateway

MICROSERVICE_TARGETS = (0.97, 5.0)  # throughput ratio at least, added TTFT p50 ms at most (issue 4)
GATEWAY_TARGETS = (0.95, 10.0)
TARGET_QUEUE_REQ_S = 1000.0


async def idle_ttfts(targets: Mapping[str, Endpoint], n: int, max_tokens: int) -> dict[str, list[float]]:
    """TTFT (ms) of ``n`` requests to each target in turn, one at a time: a hop's own latency."""
    out: dict[str, list[float]] = {name: [] for name in targets}
    clients = {name: session(endpoint.base_url, 1) for name, endpoint in targets.items()}
    try:
        for req in chat_batch(n, max_tokens):
            for name, endpoint in targets.items():
                if (ttft := (await send(clients[name], endpoint, req)).ttft_s) is not None:
                    out[name].append(ttft * 1000.0)
    finally:
        for client in clients.values():
            await client.close()
    return out


def ms_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, help="model for the engine this starts")
    p.add_argument("--engine-url", help="use this running engine instead of starting one")
    p.add_argument("--microservice-url", help="use this running microservice (in front of --engine-url)")
    p.add_argument("--model-name", help=f"model id sent (default {MODEL_NAME}, or what --engine-url serves)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=6, help="batches per target, alternating which goes first")
    p.add_argument("--idle-requests", type=int, default=16, help="requests per target sent one at a time (default 16)")
    p.add_argument("--log-dir", type=Path, default=Path("bench-results/microservice"), help="logs of started servers")
    p.add_argument("--json", dest="json_out", type=Path, help="also write the summary to this JSON file")


async def _hop(hop: str, urls: dict[str, str], args: argparse.Namespace, pids: list[int], watch: int | None) -> Result:
    """Rounds of a batch through ``hop`` and the others in ``urls`` (the first warms each up with 4 short
    requests), then requests one at a time, compared with the engine's; ``watch``'s CPU per batch."""
    batch = chat_batch(args.streams if hop == "gateway" else args.concurrency, args.max_tokens)
    model, warm = (
        args.model_name or await served_model(urls["engine"]),
        [RequestSpec(r.prompt, 0, 8) for r in batch[:4]],
    )
    targets = {name: Endpoint(url, model) for name, url in urls.items()}

    def cpu_s() -> float | None:
        return sum(cpu_seconds([watch]).values()) if watch else None

    def target(name: str) -> Callable[[int], Awaitable[Result]]:
        async def run(r: int) -> Result:
            cpu0, warmup, settings = cpu_s(), warm if r == 0 else [], {"target": name}
            result = await measure(targets[name], batch, label=name, warmup=warmup, pids=pids, settings=settings)
            return result | {"watched_cpu_s": difference(cpu_s(), cpu0)}

        return run

    rounds = await alternate({name: target(name) for name in targets}, args.rounds)
    idle = await idle_ttfts(targets, args.idle_requests, args.max_tokens)
    summary = compare_hop(rounds, hop, idle, GATEWAY_TARGETS if hop == "gateway" else MICROSERVICE_TARGETS)
    return {"streams": len(batch), "max_tokens": args.max_tokens, "rounds": args.rounds, **summary, "batches": rounds}


def microservice(args: argparse.Namespace) -> int:
    if args.microservice_url and not args.engine_url:
        print("genmesh-bench microservice: --microservice-url needs --engine-url", file=sys.stderr)
        return 2
    if args.microservice_url:
        urls = {"microservice": args.microservice_url, "engine": args.engine_url}
        summary = asyncio.run(_hop("microservice", urls, args, [], None))
    else:
        name = args.model_name or MODEL_NAME
        with running_mesh(args.model, args.log_dir, engine_url=args.engine_url, gateway=False, model_name=name) as m:
            assert m.microservice is not None
            urls = {"microservice": m.microservice.url, "engine": m.engine_url}
            summary = asyncio.run(_hop("microservice", urls, args, m.pids, m.microservice.proc.pid))
    batches, ms, (min_ratio, max_added) = summary.pop("batches"), summary["microservice"], MICROSERVICE_TARGETS
    cpu_ms = 1000 * ms["cpu_s"] / ms["tokens"] if ms["cpu_s"] and ms["tokens"] else None
    summary["microservice_cpu_ms_per_token"] = cpu_ms
    met = {key: "PASS" if ok else "FAIL" for key, ok in summary["targets_met"].items()}
    print(f"judged on {summary['judged_on']}: rounds {summary['rounds_kept']}")
    for name in ("engine", "microservice"):
        t = summary[name]
        print(
            f"{name:<13} {t['tokens_per_s']:7.1f} tok/s   TTFT p50 {fmt(t['ttft_p50_ms'], '6.0f')} ms   p99 "
            f"{fmt(t['ttft_p99_ms'], '6.0f')} ms   CPU steal {fmt(t['steal_percent'], '4.1f')}%   errors {t['errors']}"
        )
    per_round = " ".join(fmt(r, ".3f") for r in summary["throughput_ratio_per_round"])
    ratio = f"{summary['throughput_ratio']:.3f} (per round: {per_round})"
    print(f"throughput ratio microservice/engine: {ratio} target >= {min_ratio} {met['throughput_ratio']}")
    p50, p99 = fmt(summary["added_ttft_ms_p50"], "+.0f"), fmt(summary["added_ttft_ms_p99"], "+.0f")
    print(f"added TTFT: p50 {p50} ms, p99 {p99} ms; target p50 <= {max_added:.0f} ms {met['added_ttft_ms_p50']}")
    rounds = " ".join(fmt(d, "+.0f") for d in summary["added_ttft_ms_p50_per_round"])
    print(f"  per round (the p50 difference within each round; its spread is this machine's noise): {rounds}")
    idle = f"p50 {fmt(summary[ADDED[1]], '+.1f')} ms; against the same {max_added:.0f} ms {met[ADDED[1]]}"
    print(f"added TTFT one request at a time (the hop's own latency, nothing competing for the CPU): {idle}")
    print(f"microservice CPU per token: {fmt(summary['microservice_cpu_ms_per_token'], '.3f')} ms")
    out = args.json_out or args.log_dir / f"microservice-{time.strftime('%Y%m%d-%H%M%S')}.json"
    print(f"results: {save({'summary': summary, 'batches': batches}, out)}")
    return 1 if summary["engine"]["errors"] or ms["errors"] else 0


def gateway_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=["queue", "mesh", "all"], default="all")
    p.add_argument("--log-dir", default="bench-results/gateway", help="logs of the servers this starts")
    p.add_argument("--json", dest="json_out", type=Path, help="also write the results to this JSON file")
    g = p.add_argument_group("queue mode")
    g.add_argument("--clients", type=int, default=64, help="requests in flight from the client (default 64)")
    g.add_argument("--max-concurrency", type=int, default=16, help="the upstream's slots (default 16)")
    g.add_argument("--requests", type=int, default=3000, help="unary requests per pass (default 3000)")
    g.add_argument("--upstream-delay-ms", type=float, default=0.0, help="the fake upstream's time per request")
    g.add_argument("--passes", type=int, default=5, help="measured passes; the median is judged (default 5)")
    m = p.add_argument_group("mesh mode")
    m.add_argument("--model", default=DEFAULT_MODEL, help="GGUF file for the engine")
    m.add_argument("--model-name", default=MODEL_NAME, help="model name routed by the gateway")
    m.add_argument("--streams", type=int, default=32)
    m.add_argument("--max-tokens", type=int, default=128)
    m.add_argument("--rounds", type=int, default=4, help="batches per target, alternating which goes first")
    m.add_argument("--with-microservice", action="store_true", help="also stream straight to the microservice")
    m.add_argument("--idle-requests", type=int, default=16, help="requests per target sent one at a time afterwards")


def gateway(args: argparse.Namespace) -> int:
    if args.mode in ("mesh", "all") and not Path(args.model).is_file():
        print(f"mesh mode needs the model {args.model}: run 'make model'", file=sys.stderr)
        return 2
    results: dict[str, Any] = {}
    try:
        if args.mode in ("queue", "all"):
            results["queue"] = gateway_queue(args)
        if args.mode in ("mesh", "all"):
            slots, name = max(args.streams, 32), args.model_name
            with running_mesh(args.model, Path(args.log_dir), gateway_slots=slots, model_name=name) as m:
                assert m.gateway is not None and m.microservice is not None  # noqa: PT018
                urls = {"engine": m.engine_url, "gateway": m.gateway.url}
                urls |= {"microservice": m.microservice.url} if args.with_microservice else {}
                results["mesh"] = asyncio.run(_hop("gateway", urls, args, m.pids, None))
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
        upstream = stack.enter_context(start_fake_upstream(args.upstream_delay_ms, log_dir / "queue-upstream.log"))
        route = {"url": upstream.url, "health_path": "/health", "max_concurrency": slots}
        gw, redis = start_gateway(stack, Path(tmp), route, log_dir, "bench", prefix="queue-")
        port = int(gw.url.rsplit(":", 1)[1])
        asyncio.run(keepalive_load(port, args.clients, min(args.requests, args.clients * 4)))
        httpx.post(upstream.url + "/control", json={"reset": True}, timeout=5).raise_for_status()
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
    report |= {"requests_per_pass": args.requests, "passes": each}
    report |= {"judged_on": f"median of {kept.basis}", "errors": sum(r["failed"] for r in passes)}
    report |= {"admitted_per_s": round(rate, 1), "latency_ms_p50": rounded(percentile(latencies, 50))}
    report |= {"latency_ms_p99": rounded(percentile(latencies, 99)), "upstream_max_in_flight": in_flight}
    return report | {
        "targets": {"admitted_per_s": f">= {TARGET_QUEUE_REQ_S:g}", "upstream_max_in_flight": f"<= {slots}"},
        "targets_met": {"admitted_per_s": rate >= TARGET_QUEUE_REQ_S, "upstream_max_in_flight": in_flight <= slots},
    }


def admitted(result: Result) -> float:
    """Requests admitted per second: every answered request, one with an error status too."""
    return float(result["completed"] + result["failed"]) / result["duration_s"] if result["duration_s"] else 0.0


async def _read_response(reader: asyncio.StreamReader) -> int:
    """Just enough of one response (status, headers, body by length or chunks) to send the next."""
    status = int((await reader.readline()).split()[1])
    chunked, length = False, 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        key, _, value = line.decode("latin-1").partition(":")
        chunked = chunked or (key.lower() == "transfer-encoding" and "chunked" in value)
        length = int(value) if key.lower() == "content-length" else length
    if not chunked:
        await reader.readexactly(length)
        return status
    while size := int((await reader.readline()).strip(), 16):
        await reader.readexactly(size + 2)
    await reader.readexactly(2)
    return status


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
