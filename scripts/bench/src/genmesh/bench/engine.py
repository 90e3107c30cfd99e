"""``genmesh-bench engine`` (README: Benchmarks): HTTP server against in-process pipeline, or prefix caching
off and on. A ``/health`` poll costs the API process 0.5 ms of CPU and the client 0.3 ms: at 50 a second that
took 4 % of the two cores, which a real probe does not, hence every 100 ms."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from genmesh.engine.pipeline_config import SCHEDULER_FIELDS as FIELDS
from genmesh.engine.settings import DEFAULT_MODEL

from .compare import QUIET_STEAL_PCT, alternate, is_quiet, keep_quiet, ratio
from .datasets import RequestSpec, TokenCodec, default_prompts, shared_prefix_requests
from .inprocess import Pipeline, Scheduler
from .load import Endpoint, measure, served_model
from .render import fmt, say, table
from .results import Result, describe, percentile, save
from .servers import start_engine

TARGET_RATIO = 0.90
TARGET_HEALTH_P99_MS = 50.0
TARGET_TTFT_RATIO = 0.5  # prefix caching should at least halve the median TTFT
WARMUP_TOKENS = 16
COLUMNS: dict[str, tuple[str, str, Callable[[Result, Result], float | None]]] = {  # key: (column, format, figure)
    "http_tok_s": ("HTTP tok/s", ".1f", lambda h, i: h["output_throughput"]),
    "inproc_tok_s": ("in-proc tok/s", ".1f", lambda h, i: i["output_throughput"]),
    "ratio": ("HTTP/in-proc", ".3f", lambda h, i: ratio(h["output_throughput"], i["output_throughput"])),
    "ttft_p50_ms": ("TTFT p50 ms", ".0f", lambda h, i: h["median_ttft_ms"]),
    "ttft_p99_ms": ("TTFT p99 ms", ".0f", lambda h, i: h["p99_ttft_ms"]),
    "health_p50_ms": ("/health p50 ms", ".1f", lambda h, i: h["health_p50_ms"]),
    "health_p99_ms": ("/health p99 ms", ".1f", lambda h, i: h["health_p99_ms"]),
    "steal_http": ("steal HTTP %", ".1f", lambda h, i: h["steal_percent"]),
    "steal_inproc": ("steal in-proc %", ".1f", lambda h, i: i["steal_percent"]),
    "other_http": ("other CPU HTTP %", ".1f", lambda h, i: h["other_percent"]),
    "other_inproc": ("other CPU in-proc %", ".1f", lambda h, i: i["other_percent"]),
}


def summary(rounds: dict[str, list[Result]], max_steal_pct: float, concurrency: int) -> dict[str, Any]:
    """The table (a row per run, and the medians of all and of the quiet runs), verdicts and figures."""
    kept = keep_quiet(rounds, max_steal_pct, noun="runs")
    pairs = list(zip(rounds["http"], rounds["in-process"], strict=True))
    per_run = [{key: figure(h, i) for key, (_, _, figure) in COLUMNS.items()} for h, i in pairs]

    def medians(runs: Sequence[dict[str, float | None]]) -> dict[str, float | None]:
        return {key: percentile((run[key] for run in runs), 50) for key in COLUMNS}

    def cells(figures: dict[str, float | None]) -> list[str]:
        return [fmt(figures[key], spec) for key, (_, spec, _) in COLUMNS.items()]

    quiet = medians(kept.of(per_run)) if kept.quiet else None
    meds, judged = {"all": medians(per_run), "quiet": quiet}, quiet or medians(per_run)
    rows = [[str(h["round"]), "/".join(h["order"]), *cells(f)] for (h, _), f in zip(pairs, per_run, strict=True)]
    rows += [["median", name, *cells(m)] for name, m in meds.items() if m]
    ratio_, health = judged["ratio"], judged["health_p99_ms"]
    ratio_met = ratio_ is not None and ratio_ >= TARGET_RATIO
    health_met = health is not None and health < TARGET_HEALTH_P99_MS
    verdicts = [
        f"judged on the median of {kept.basis}",
        f"target HTTP/in-process >= {TARGET_RATIO:.2f} at {concurrency} streams: "
        + ("-" if ratio_ is None else f"{ratio_:.3f} {'PASS' if ratio_met else 'FAIL'}"),
        f"target /health p99 < {TARGET_HEALTH_P99_MS:.0f} ms while saturated: "
        + ("-" if health is None else f"{health:.1f} ms {'PASS' if health_met else 'FAIL'}"),
    ]
    runs = [
        {"run": h["round"], "order": h["order"], "ratio": f["ratio"], "http": h, "in_process": i}
        | {"quiet": is_quiet((h["steal_percent"], i["steal_percent"]), max_steal_pct)}
        for (h, i), f in zip(pairs, per_run, strict=True)
    ]
    targets = {"judged_on": f"median of {kept.basis}", "ratio_min": TARGET_RATIO, "ratio_met": ratio_met}
    targets |= {"health_p99_ms_max": TARGET_HEALTH_P99_MS, "health_met": health_met}
    header = ["run", "order", *(column for column, _, _ in COLUMNS.values())]
    figures = {"runs": runs, "median": meds["all"], "median_quiet": meds["quiet"], "targets": targets}
    return {"table": table(header, rows), "verdicts": verdicts} | figures


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = Scheduler()
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"GGUF file or OpenVINO IR folder (default {DEFAULT_MODEL})")
    p.add_argument("--url", help="bench an engine already running at this base URL (its settings are its own)")
    p.add_argument("--concurrency", type=int, default=32, help="concurrent streaming requests (default 32)")
    p.add_argument("--max-tokens", type=int, default=128, help="new tokens per request, ignore_eos (default 128)")
    p.add_argument("--repeats", type=int, default=6, help="HTTP/in-process pairs, alternating order (default 6)")
    quiet = "judge on the pairs whose sides lost at most this much CPU to steal, when two or more (default 5)"
    p.add_argument("--quiet-steal-pct", type=float, default=QUIET_STEAL_PCT, help=quiet)
    p.add_argument("--warmup-requests", type=int, default=4, help="warm-up requests before each side (default 4)")
    p.add_argument("--health-interval-ms", type=float, default=100.0, help="/health poll interval (default 100)")
    p.add_argument("--results-dir", type=Path, default=Path("bench-results"), help="where JSON results go")
    p.add_argument("--startup-timeout-s", type=float, default=300.0, help="seconds allowed for the server to start")
    prefix = "instead: TTFT of requests sharing one long system prompt, with prefix caching off and on"
    p.add_argument("--shared-prefix", action="store_true", help=prefix)
    p.add_argument("--shared-prefix-len", type=int, default=1024, help="system prompt tokens (default 1024)")
    g = p.add_argument_group("scheduler (both sides)")
    g.add_argument("--cache-size", type=int, default=d.cache_size, help="KV cache size in GB")
    g.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    g.add_argument("--max-num-batched-tokens", type=int, default=d.max_num_batched_tokens)
    g.add_argument("--dynamic-split-fuse", action=argparse.BooleanOptionalAction, default=d.dynamic_split_fuse)
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=d.enable_prefix_caching)
    g.add_argument("--plugin-config", type=json.loads, default={}, help="OpenVINO plugin config as JSON")


def run(args: argparse.Namespace) -> int:
    counts = {"concurrency": args.concurrency, "max-tokens": args.max_tokens, "repeats": args.repeats}
    problems = [f"--{name} must be at least 1" for name, n in counts.items() if n < 1]
    problems += [] if Path(args.model).exists() else [f"model {args.model!r} does not exist (run 'make model')"]
    if problems:
        print(f"genmesh-bench engine: {problems[0]}", file=sys.stderr)
        return 2
    scheduler = Scheduler(**{name: getattr(args, name) for name in FIELDS}, plugin_config=args.plugin_config)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return asyncio.run((shared_prefix if args.shared_prefix else pairs)(args, scheduler, stamp))


async def pairs(args: argparse.Namespace, scheduler: Scheduler, stamp: str) -> int:
    prompts, warmup = default_prompts(args.concurrency), min(args.warmup_requests, args.concurrency)
    runs = f"{args.concurrency} streams x {args.max_tokens} tokens, {args.repeats} run(s)"
    say(f"bench engine: {runs}, model {args.model}, scheduler {scheduler}")
    server, log, t0 = None, args.results_dir / f"engine-{stamp}-server.log", time.perf_counter()
    if not args.url:
        say(f"http: starting the engine server (log: {log})")
        server = await asyncio.to_thread(start_engine, args.model, scheduler, log, timeout_s=args.startup_timeout_s)
        say(f"http: server healthy at {server.url} after {time.perf_counter() - t0:.1f}s")
    url = server.url if server else args.url.rstrip("/")
    with server or contextlib.nullcontext():
        endpoint = Endpoint(url, await served_model(url))
        say(f"http: warm-up ({warmup} requests x {WARMUP_TOKENS} tokens)")
        await measure(endpoint, [RequestSpec(p, 0, WARMUP_TOKENS) for p in prompts[:warmup]], label="warm-up")
        requests, pids = [RequestSpec(p, 0, args.max_tokens) for p in prompts], [server.proc.pid] if server else []
        health = {"health_url": url + "/health", "health_interval_s": args.health_interval_ms / 1000.0}
        with Pipeline(args.model, scheduler, prompts, warmup, WARMUP_TOKENS) as pipe:

            async def http(_: int) -> Result:
                return await measure(endpoint, requests, label="http", pids=pids, **health)

            async def in_process(_: int) -> Result:
                return await asyncio.to_thread(pipe.measure, "in-process", len(prompts), args.max_tokens)

            rounds = await alternate({"http": http, "in-process": in_process}, args.repeats)
    s = summary(rounds, args.quiet_steal_pct, args.concurrency)
    print(s.pop("table"), *s.pop("verdicts"), sep="\n")
    if failed := sum(r["failed"] for r in rounds["http"]):
        print(f"{failed} HTTP request(s) failed, first: {next((e for r in rounds['http'] for e in r['errors']), '-')}")
    workload = {"concurrency": args.concurrency, "max_tokens": args.max_tokens, "greedy": True, "ignore_eos": True}
    workload |= {"warmup_requests": warmup, "warmup_max_tokens": WARMUP_TOKENS}
    workload |= {"health_interval_ms": args.health_interval_ms, "prompts": prompts}
    doc = {"benchmark": "engine", "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": describe()}
    doc |= {"model": args.model, "url": args.url, "scheduler": dataclasses.asdict(scheduler), "workload": workload}
    doc |= s | {"quiet_steal_pct": args.quiet_steal_pct}
    print(f"results: {save(doc, args.results_dir / f'engine-{stamp}.json')}")
    return 1 if failed else 0


async def shared_prefix(args: argparse.Namespace, scheduler: Scheduler, stamp: str) -> int:
    codec = TokenCodec(Path(args.model))
    reqs = shared_prefix_requests(codec, args.concurrency, args.shared_prefix_len, args.max_tokens)
    say(f"bench engine --shared-prefix: {args.concurrency} requests, {args.shared_prefix_len}-token system prompt")
    warm = [RequestSpec("Warm-up: say hello.", 0, 4, reqs[0].system)]

    def side(caching: bool) -> Callable[[int], Awaitable[Result]]:
        async def one(i: int) -> Result:
            sched = dataclasses.replace(scheduler, enable_prefix_caching=caching)
            log, timeout = args.results_dir / f"prefix-{stamp}-{i}-{caching}.log", args.startup_timeout_s
            server = await asyncio.to_thread(start_engine, args.model, sched, log, timeout_s=timeout)
            try:
                endpoint = Endpoint(server.url, await served_model(server.url))
                settings = {"target": "engine", "enable_prefix_caching": caching, "dataset": "shared-prefix"}
                label = f"prefix caching {'on' if caching else 'off'}"
                pids = [server.proc.pid]
                return await measure(endpoint, reqs, label=label, warmup=warm, pids=pids, settings=settings)
            finally:
                await asyncio.to_thread(server.stop)

        return one

    rounds = await alternate({"off": side(False), "on": side(True)}, args.repeats)
    runs = [rounds[name][i] for i in range(args.repeats) for name in rounds["off"][i]["order"]]
    header = ["prefix caching", "TTFT p50 ms", "TTFT p99 ms", "tok/s", "steal %", "failed"]
    figures = {"median_ttft_ms": ".0f", "p99_ttft_ms": ".0f", "output_throughput": ".1f", "steal_percent": ".1f"}
    rows = [[r["label"].split()[-1], *(fmt(r[k], spec) for k, spec in figures.items()), str(r["failed"])] for r in runs]
    print(table(header, rows))
    ttft = ratio(*(percentile((r["median_ttft_ms"] for r in rounds[name]), 50) for name in ("on", "off")))
    verdict = "-" if ttft is None else f"{ttft:.3f} {'PASS' if ttft <= TARGET_TTFT_RATIO else 'FAIL'}"
    print(f"target TTFT p50 with prefix caching / without <= {TARGET_TTFT_RATIO:.2f}: {verdict}")
    print(f"results: {save(runs, args.results_dir / f'engine-shared-prefix-{stamp}.json')}")
    return 1 if any(r["failed"] for r in runs) else 0
