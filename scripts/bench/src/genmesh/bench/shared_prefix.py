"""``genmesh-bench engine --shared-prefix``: TTFT with the engine's prefix caching off and on, in one run.

N requests share one long system prompt and each asks its own question. For each setting a
fresh engine starts; one warm-up request with the same system prompt (and another question)
goes first, so with caching on the prefix is in the cache when the measured requests arrive.
Settings alternate over ``--repeats`` (off, on, on, off, ...) to spread drift in CPU steal.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

from .client import Endpoint, served_model
from .datasets import RequestSpec, shared_prefix_requests
from .progress import say
from .render import fmt
from .results import save
from .runner import measure
from .server import start_engine
from .stats import median
from .tokens import ModelTokenizer
from .workload import Scheduler

TARGET_TTFT_RATIO = 0.5  # prefix caching should at least halve the median TTFT


def _one(
    args: argparse.Namespace, scheduler: Scheduler, caching: bool, reqs: list[RequestSpec], log: Path
) -> dict[str, Any]:
    sched = dataclasses.replace(scheduler, enable_prefix_caching=caching)
    server = start_engine(args.model, sched, log, timeout_s=args.startup_timeout_s)
    try:
        endpoint = Endpoint(server.url, asyncio.run(served_model(server.url)))
        warm = [RequestSpec("Warm-up: say hello.", 0, 4, reqs[0].system)]
        label = f"prefix caching {'on' if caching else 'off'}"
        return measure(
            endpoint,
            reqs,
            label=label,
            warmup=warm,
            pids=[server.proc.pid],
            settings={"target": "engine", "enable_prefix_caching": caching, "dataset": "shared-prefix"},
            progress=False,
        )
    finally:
        server.stop()


def run(args: argparse.Namespace, scheduler: Scheduler) -> int:
    codec = ModelTokenizer(Path(args.model))
    reqs = shared_prefix_requests(codec, args.concurrency, args.shared_prefix_len, args.max_tokens)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    say(
        f"bench engine --shared-prefix: {args.concurrency} requests, {args.shared_prefix_len}-token system prompt, "
        f"{args.max_tokens} new tokens, {args.repeats} pair(s)"
    )
    runs: list[dict[str, Any]] = []
    for i in range(args.repeats):
        for caching in (False, True) if i % 2 == 0 else (True, False):
            say(f"pair {i + 1}: prefix caching {'on' if caching else 'off'}")
            runs.append(_one(args, scheduler, caching, reqs, args.results_dir / f"prefix-{stamp}-{i}-{caching}.log"))
    print(f"{'prefix caching':>14}  {'TTFT p50 ms':>11}  {'TTFT p99 ms':>11}  {'tok/s':>7}  {'steal %':>7}  failed")
    for r in runs:
        print(
            f"{'on' if r['enable_prefix_caching'] else 'off':>14}  {fmt(r['median_ttft_ms'], '.0f'):>11}  "
            f"{fmt(r['p99_ttft_ms'], '.0f'):>11}  {fmt(r['output_throughput']):>7}  {fmt(r['steal_percent']):>7}  "
            f"{r['failed']}"
        )
    on = median([r["median_ttft_ms"] for r in runs if r["enable_prefix_caching"]])
    off = median([r["median_ttft_ms"] for r in runs if not r["enable_prefix_caching"]])
    ratio = on / off if on is not None and off else None
    verdict = "-" if ratio is None else f"{ratio:.3f} {'PASS' if ratio <= TARGET_TTFT_RATIO else 'FAIL'}"
    print(f"target TTFT p50 with prefix caching / without <= {TARGET_TTFT_RATIO:.2f}: {verdict}")
    out = save(runs, args.results_dir / f"engine-shared-prefix-{stamp}.json")
    print(f"results: {out}")
    return 1 if any(r["failed"] for r in runs) else 0
