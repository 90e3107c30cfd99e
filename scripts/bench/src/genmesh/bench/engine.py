"""``genmesh-bench engine`` (docs/benchmarking.md): HTTP server against in-process pipeline, in rounds that
alternate which goes first. A ``/health`` poll costs the API process 0.5 ms of CPU and the client 0.3 ms:
at 50 a second that took 4 % of the two cores, which a real probe does not, hence every 100 ms."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from genmesh.engine.settings import DEFAULT_MODEL

from .compare import QUIET_STEAL_PCT, alternate, compare_hop
from .datasets import RequestSpec, chat_batch
from .inprocess import Pipeline, engine_settings, scheduler_text
from .load import Endpoint, measure, served_model
from .render import say
from .results import Result, describe, percentile, save
from .servers import start_engine

TARGET_RATIO = 0.90
TARGET_HEALTH_P99_MS = 50.0
WARMUP_REQUESTS, WARMUP_TOKENS = 4, 16  # before each side


def summary(rounds: dict[str, list[Result]], max_steal_pct: float) -> dict[str, Any]:
    """HTTP against in-process, and ``/health`` p99 while saturated (median of the kept rounds), with targets."""
    s = compare_hop(rounds, "http", {}, (TARGET_RATIO, None), base="in-process", max_steal_pct=max_steal_pct)
    health = percentile((rounds["http"][i - 1]["health_p99_ms"] for i in s["rounds_kept"]), 50)
    s["health_p99_ms"], s["targets"]["health_p99_ms"] = health, f"< {TARGET_HEALTH_P99_MS:g}"
    s["targets_met"]["health_p99_ms"] = health is not None and health < TARGET_HEALTH_P99_MS
    return s


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"GGUF file or OpenVINO IR folder (default {DEFAULT_MODEL})")
    flags = "genmesh-engine flags for both sides, e.g. --engine-args='--max-num-batched-tokens 512' (default: none)"
    p.add_argument("--engine-args", type=shlex.split, default=[], help=flags)
    p.add_argument("--concurrency", type=int, default=32, help="concurrent streaming requests (default 32)")
    p.add_argument("--max-tokens", type=int, default=128, help="new tokens per request, ignore_eos (default 128)")
    p.add_argument("--repeats", type=int, default=6, help="HTTP/in-process pairs, alternating order (default 6)")
    quiet = "judge on the pairs whose sides lost at most this much CPU to steal, when two or more (default 5)"
    p.add_argument("--quiet-steal-pct", type=float, default=QUIET_STEAL_PCT, help=quiet)
    p.add_argument("--health-interval-ms", type=float, default=100.0, help="/health poll interval (default 100)")
    p.add_argument("--results-dir", type=Path, default=Path("bench-results"), help="where JSON results go")


def run(args: argparse.Namespace) -> int:
    counts = {"concurrency": args.concurrency, "max-tokens": args.max_tokens, "repeats": args.repeats}
    problems = [f"--{name} must be at least 1" for name, n in counts.items() if n < 1]
    problems += [] if Path(args.model).exists() else [f"model {args.model!r} does not exist (run 'make model')"]
    if problems:
        print(f"genmesh-bench engine: {problems[0]}", file=sys.stderr)
        return 2
    args.results_dir.mkdir(parents=True, exist_ok=True)
    return asyncio.run(pairs(args, time.strftime("%Y%m%d-%H%M%S")))


async def pairs(args: argparse.Namespace, stamp: str) -> int:
    prompts, warmup = [r.prompt for r in chat_batch(args.concurrency, 0)], min(WARMUP_REQUESTS, args.concurrency)
    settings = engine_settings(args.model, args.engine_args)  # what both sides run with
    runs = f"{args.concurrency} streams x {args.max_tokens} tokens, {args.repeats} run(s)"
    say(f"bench engine: {runs}, model {args.model}, {scheduler_text(settings)}")
    log, t0 = args.results_dir / f"engine-{stamp}-server.log", time.perf_counter()
    say(f"http: starting the engine server (log: {log})")
    server = await asyncio.to_thread(start_engine, args.model, log, extra=args.engine_args)
    say(f"http: server healthy at {server.url} after {time.perf_counter() - t0:.1f}s")
    with server:
        url = server.url
        endpoint = Endpoint(url, await served_model(url))
        say(f"http: warm-up ({warmup} requests x {WARMUP_TOKENS} tokens)")
        await measure(endpoint, [RequestSpec(p, 0, WARMUP_TOKENS) for p in prompts[:warmup]], label="warm-up")
        requests, pids = [RequestSpec(p, 0, args.max_tokens) for p in prompts], [server.proc.pid]
        health = {"health_url": url + "/health", "health_interval_s": args.health_interval_ms / 1000.0}
        with Pipeline(args.model, args.engine_args, prompts, warmup, WARMUP_TOKENS) as pipe:

            async def http(_: int) -> Result:
                return await measure(endpoint, requests, label="http", pids=pids, **health)

            async def in_process(_: int) -> Result:
                return await asyncio.to_thread(pipe.measure, "in-process", len(prompts), args.max_tokens)

            rounds = await alternate({"http": http, "in-process": in_process}, args.repeats)
    s = summary(rounds, args.quiet_steal_pct)
    print(json.dumps(s, indent=2))
    if failed := sum(r["failed"] for r in rounds["http"]):
        print(f"{failed} HTTP request(s) failed, first: {next((e for r in rounds['http'] for e in r['errors']), '-')}")
    workload = {"concurrency": args.concurrency, "max_tokens": args.max_tokens, "greedy": True, "ignore_eos": True}
    workload |= {"warmup_requests": warmup, "warmup_max_tokens": WARMUP_TOKENS}
    workload |= {"health_interval_ms": args.health_interval_ms, "prompts": prompts}
    doc = {"benchmark": "engine", "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": describe()}
    doc |= {"model": args.model, "engine_args": args.engine_args, "workload": workload}
    doc |= {"summary": s, "rounds": rounds, "quiet_steal_pct": args.quiet_steal_pct}
    print(f"results: {save(doc, args.results_dir / f'engine-{stamp}.json')}")
    return 1 if failed else 0
