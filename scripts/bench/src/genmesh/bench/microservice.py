"""``genmesh-bench microservice``: what the microservice hop costs, side by side with the engine.

Starts an engine and a microservice in front of it (or uses ``--engine-url`` and
``--microservice-url``), then runs rounds of ``--concurrency`` streaming chat requests
(``ignore_eos``, greedy) against each, alternating which goes first. Reports output-token
throughput and the ratio microservice/engine, TTFT p50/p99 and what the hop adds, the CPU steal
of each batch, and the microservice's CPU milliseconds per token. Then ``--idle-requests`` sent
one at a time to each, alternating: the TTFT the hop adds when nothing competes for the CPU
(reported beside the target, which is judged at 32 concurrent streams).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genmesh.engine.settings import DEFAULT_MODEL

from .client import Endpoint, served_model
from .mesh import MODEL_NAME, running_mesh
from .render import fmt
from .results import save
from .rounds import Totals, alternate, chat_batch, idle_ttfts, quiet_rounds, round_ttft_diffs, totals
from .stats import difference, percentile
from .workload import Scheduler

TARGET_RATIO = 0.97  # issue 4
TARGET_ADDED_TTFT_P50_MS = 5.0


def summarize(
    args: argparse.Namespace, all_batches: dict[str, list[dict[str, Any]]], idle: dict[str, list[float]]
) -> dict[str, Any]:
    kept = quiet_rounds(all_batches)
    batches = kept.batches
    ms, eng = totals(batches["microservice"]), totals(batches["engine"])
    per_round = [
        m["output_throughput"] / e["output_throughput"]
        for m, e in zip(batches["microservice"], batches["engine"], strict=True)
        if e["output_throughput"]
    ]
    tokens = sum(b["total_output_tokens"] for b in batches["microservice"])
    return {
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "judged_on": kept.basis,
        "rounds_kept": kept.rounds,
        "engine": dataclasses.asdict(eng),
        "microservice": dataclasses.asdict(ms),
        "throughput_ratio": ms.tokens_per_s / eng.tokens_per_s if eng.tokens_per_s else math.nan,
        "throughput_ratio_per_round": per_round,
        "added_ttft_p50_ms": difference(ms.ttft_p50_ms, eng.ttft_p50_ms),
        "added_ttft_p99_ms": difference(ms.ttft_p99_ms, eng.ttft_p99_ms),
        "added_ttft_p50_ms_per_round": round_ttft_diffs(batches["microservice"], batches["engine"]),
        "idle_ttft_p50_ms": {name: percentile(ttfts, 50) for name, ttfts in idle.items()},
        "added_idle_ttft_p50_ms": difference(percentile(idle["microservice"], 50), percentile(idle["engine"], 50)),
        "microservice_cpu_ms_per_token": None if ms.cpu_s is None or not tokens else 1000 * ms.cpu_s / tokens,
        "target_ratio": TARGET_RATIO,
    }


def print_report(summary: dict[str, Any]) -> None:
    print(f"judged on {summary['judged_on']}: rounds {summary['rounds_kept']}")
    for name in ("engine", "microservice"):
        t = Totals(**summary[name])
        print(
            f"{name:<13} {t.tokens_per_s:7.1f} tok/s   TTFT p50 {fmt(t.ttft_p50_ms, '6.0f')} ms   "
            f"p99 {fmt(t.ttft_p99_ms, '6.0f')} ms   CPU steal {fmt(t.steal_percent, '4.1f')}%   errors {t.errors}"
        )
    ratio = summary["throughput_ratio"]
    per_round = " ".join(f"{r:.3f}" for r in summary["throughput_ratio_per_round"])
    verdict = "PASS" if ratio >= TARGET_RATIO else "FAIL"
    print(
        f"throughput ratio microservice/engine: {ratio:.3f} (per round: {per_round}) target >= {TARGET_RATIO} {verdict}"
    )
    p50, p99 = fmt(summary["added_ttft_p50_ms"], "+.0f"), fmt(summary["added_ttft_p99_ms"], "+.0f")
    added = summary["added_ttft_p50_ms"]
    ttft_verdict = "PASS" if added is not None and added <= TARGET_ADDED_TTFT_P50_MS else "FAIL"
    print(f"added TTFT: p50 {p50} ms, p99 {p99} ms; target p50 <= {TARGET_ADDED_TTFT_P50_MS:.0f} ms {ttft_verdict}")
    rounds = " ".join(fmt(d, "+.0f") for d in summary["added_ttft_p50_ms_per_round"])
    print(f"  per round (the p50 difference within each round; its spread is this machine's noise): {rounds}")
    idle_added = summary["added_idle_ttft_p50_ms"]
    idle_verdict = "PASS" if idle_added is not None and idle_added <= TARGET_ADDED_TTFT_P50_MS else "FAIL"
    print(
        f"added TTFT one request at a time (the hop's own latency, nothing competing for the CPU): "
        f"p50 {fmt(idle_added, '+.1f')} ms; against the same {TARGET_ADDED_TTFT_P50_MS:.0f} ms {idle_verdict}"
    )
    print(f"microservice CPU per token: {fmt(summary['microservice_cpu_ms_per_token'], '.3f')} ms")


def add_arguments(p: argparse.ArgumentParser) -> None:
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


async def _measure(
    args: argparse.Namespace, engine_url: str, ms_url: str, pids: list[int], ms_pid: int | None
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[float]]]:
    model = args.model_name or await served_model(engine_url)
    targets = {"microservice": Endpoint(ms_url, model), "engine": Endpoint(engine_url, model)}
    batches = await alternate(
        targets, chat_batch(args.concurrency, args.max_tokens), args.rounds, pids=pids, watch_pid=ms_pid
    )
    return batches, await idle_ttfts(targets, args.idle_requests, args.max_tokens)


def run(args: argparse.Namespace) -> int:
    if args.microservice_url and not args.engine_url:
        print("genmesh-bench microservice: --microservice-url needs --engine-url", file=sys.stderr)
        return 2
    if args.microservice_url:
        batches, idle = asyncio.run(_measure(args, args.engine_url, args.microservice_url, [], None))
    else:
        with running_mesh(
            args.model,
            Scheduler(),
            args.log_dir,
            engine_url=args.engine_url,
            gateway=False,
            model_name=args.model_name or MODEL_NAME,
        ) as mesh:
            assert mesh.microservice is not None
            pids = [s.proc.pid for s in (mesh.engine, mesh.microservice) if s is not None]
            batches, idle = asyncio.run(
                _measure(args, mesh.engine_url, mesh.microservice.url, pids, mesh.microservice.proc.pid)
            )
    summary = summarize(args, batches, idle)
    print_report(summary)
    out = args.json_out or args.log_dir / f"microservice-{time.strftime('%Y%m%d-%H%M%S')}.json"
    save({"summary": summary, "batches": batches}, out)
    print(f"results: {out}")
    return 1 if summary["engine"]["errors"] or summary["microservice"]["errors"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="genmesh-bench microservice", description=__doc__.splitlines()[0] if __doc__ else None
    )
    add_arguments(p)
    return run(p.parse_args(argv))
