"""``genmesh-bench engine``: the engine's HTTP server against the in-process pipeline, same work.

One run is a pair of measurements: N concurrent streaming chat requests through the HTTP
server (a subprocess, or ``--url``), and the same prompts through
``ContinuousBatchingPipeline.generate()`` in a worker process. Both are loaded once and stay
loaded for every pair; each sits idle (no CPU) while the other is measured, so the two never
share the cores. Pairs alternate their order (HTTP then in-process, in-process then HTTP, ...),
back to back with no reload between them, so drift in the machine's speed (CPU steal, busy
neighbours) falls on both sides alike.

While the HTTP side runs, a second client polls ``/health`` (every 100 ms by default). Each
poll costs the engine's API process about 0.5 ms of CPU and the client about 0.3 ms on this
machine; at 50 polls a second that was 4 % of the two cores taken from the generation, a cost
an in-process run does not pay and a real probe (every few seconds) does not impose.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genmesh.engine.settings import DEFAULT_MODEL

from . import shared_prefix
from .client import Endpoint, served_model
from .datasets import RequestSpec
from .inprocess import Ceiling, InProcessResult
from .load import LoadResult, run_load
from .progress import say
from .server import start_engine
from .stats import median, percentile
from .steal import QUIET_STEAL_PCT, StealMeter, is_quiet, quiet_indices
from .workload import Scheduler, Workload, default_prompts

TARGET_RATIO = 0.90
TARGET_HEALTH_P99_MS = 50.0


@dataclass(frozen=True)
class HttpResult:
    wall_s: float
    completion_tokens: int
    tokens_per_s: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    e2e_p50_ms: float | None
    health_p50_ms: float | None
    health_p99_ms: float | None
    health_max_ms: float | None
    health_polls: int
    health_failures: int
    errors: list[str]
    steal_percent: float | None
    busy_percent: float | None
    other_percent: float | None


@dataclass(frozen=True)
class RunResult:
    run: int
    order: list[str]
    http: HttpResult
    in_process: InProcessResult

    @property
    def ratio(self) -> float | None:
        base = self.in_process.tokens_per_s
        return self.http.tokens_per_s / base if base > 0 else None

    @property
    def steals(self) -> tuple[float | None, float | None]:
        """CPU steal of each side (HTTP, in-process)."""
        return (self.http.steal_percent, self.in_process.steal_percent)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _http_result(load: LoadResult, meter: StealMeter) -> HttpResult:
    ok = [o for o in load.outputs if o.success]
    ttfts = [o.ttft_s for o in ok if o.ttft_s is not None]
    health = load.health_latencies_s
    return HttpResult(
        wall_s=load.duration_s,
        completion_tokens=load.output_tokens,
        tokens_per_s=load.output_tokens_per_s,
        ttft_p50_ms=_ms(percentile(ttfts, 50)),
        ttft_p99_ms=_ms(percentile(ttfts, 99)),
        e2e_p50_ms=_ms(percentile([o.e2e_s for o in ok], 50)),
        health_p50_ms=_ms(percentile(health, 50)),
        health_p99_ms=_ms(percentile(health, 99)),
        health_max_ms=_ms(max(health)) if health else None,
        health_polls=len(health),
        health_failures=load.health_failures,
        errors=load.errors,
        steal_percent=meter.steal_percent,
        busy_percent=meter.busy_percent,
        other_percent=meter.other_percent,
    )


def _requests(prompts: Sequence[str], max_tokens: int) -> list[RequestSpec]:
    return [RequestSpec(p, 0, max_tokens) for p in prompts]


async def _warm_up(base_url: str, workload: Workload) -> Endpoint:
    """Warm the server up; returns the endpoint every measurement then uses (the model it serves)."""
    endpoint = Endpoint(base_url, await served_model(base_url))
    say(f"http: warm-up ({len(workload.warmup_prompts)} requests x {workload.warmup_max_tokens} tokens)")
    await run_load(endpoint, _requests(workload.warmup_prompts, workload.warmup_max_tokens))
    return endpoint


async def _http_phase(
    endpoint: Endpoint, workload: Workload, health_interval_s: float, server_pid: int | None
) -> HttpResult:
    say(f"http: measuring {workload.concurrency} concurrent streams x {workload.max_tokens} tokens")
    pids = [os.getpid()] if server_pid is None else [os.getpid(), server_pid]
    with StealMeter(pids) as meter:
        load = await run_load(
            endpoint,
            _requests(workload.prompts, workload.max_tokens),
            health_url=endpoint.base_url + "/health",
            health_interval_s=health_interval_s,
        )
    return _http_result(load, meter)


@contextmanager
def http_server(args: argparse.Namespace, scheduler: Scheduler, log_path: Path) -> Iterator[tuple[str, int | None]]:
    """The engine under test for the whole run: ``--url``, or a server started now and stopped at the end.
    Yields its base URL and its process id (None for ``--url``)."""
    if args.url:
        yield args.url.rstrip("/"), None
        return
    say(f"http: starting the engine server (log: {log_path})")
    t0 = time.perf_counter()
    server = start_engine(args.model, scheduler, log_path, timeout_s=args.startup_timeout_s)
    try:
        say(f"http: server healthy at {server.url} after {time.perf_counter() - t0:.1f}s")
        yield server.url, server.proc.pid
    finally:
        server.stop()
        say("http: server stopped")


# -- report -------------------------------------------------------------------------------


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


COLUMNS = (
    "run",
    "order",
    "HTTP tok/s",
    "in-proc tok/s",
    "HTTP/in-proc",
    "TTFT p50 ms",
    "TTFT p99 ms",
    "/health p50 ms",
    "/health p99 ms",
    "steal HTTP %",
    "steal in-proc %",
    "other CPU HTTP %",
    "other CPU in-proc %",
)


def _row(label: str, order: str, values: dict[str, float | None]) -> list[str]:
    return [
        label,
        order,
        _fmt(values["http_tok_s"]),
        _fmt(values["inproc_tok_s"]),
        _fmt(values["ratio"], ".3f"),
        _fmt(values["ttft_p50_ms"], ".0f"),
        _fmt(values["ttft_p99_ms"], ".0f"),
        _fmt(values["health_p50_ms"]),
        _fmt(values["health_p99_ms"]),
        _fmt(values["steal_http"]),
        _fmt(values["steal_inproc"]),
        _fmt(values["other_http"]),
        _fmt(values["other_inproc"]),
    ]


def _values(run: RunResult) -> dict[str, float | None]:
    return {
        "http_tok_s": run.http.tokens_per_s,
        "inproc_tok_s": run.in_process.tokens_per_s,
        "ratio": run.ratio,
        "ttft_p50_ms": run.http.ttft_p50_ms,
        "ttft_p99_ms": run.http.ttft_p99_ms,
        "health_p50_ms": run.http.health_p50_ms,
        "health_p99_ms": run.http.health_p99_ms,
        "steal_http": run.http.steal_percent,
        "steal_inproc": run.in_process.steal_percent,
        "other_http": run.http.other_percent,
        "other_inproc": run.in_process.other_percent,
    }


def summarize(runs: Sequence[RunResult]) -> dict[str, float | None]:
    per_run = [_values(r) for r in runs]
    return {key: median([v[key] for v in per_run]) for key in per_run[0]}


@dataclass(frozen=True)
class Summary:
    """The median of every run, and of the quiet runs (:func:`.steal.quiet_indices`: steal at most
    ``max_steal_pct`` on both sides, two or more of them); the targets are judged on the quiet runs'
    median when there is one, on all runs otherwise, and the table shows both."""

    all_runs: dict[str, float | None]
    quiet_runs: dict[str, float | None] | None
    quiet_count: int
    max_steal_pct: float

    @property
    def judged(self) -> dict[str, float | None]:
        return self.quiet_runs if self.quiet_runs is not None else self.all_runs

    @property
    def basis(self) -> str:
        if self.quiet_runs is not None:
            return f"median of {self.quiet_count} quiet runs (steal <= {self.max_steal_pct:g}%)"
        return f"median of all runs (fewer than 2 with steal <= {self.max_steal_pct:g}%)"


def summary_of(runs: Sequence[RunResult], max_steal_pct: float) -> Summary:
    quiet = quiet_indices([r.steals for r in runs], max_steal_pct)
    quiet_runs = None if quiet is None else summarize([runs[i] for i in quiet])
    return Summary(summarize(runs), quiet_runs, len(quiet or ()), max_steal_pct)


def render_table(runs: Sequence[RunResult], summary: Summary) -> str:
    rows = [list(COLUMNS)]
    rows += [_row(str(r.run), "/".join(r.order), _values(r)) for r in runs]
    rows.append(_row("median", "all", summary.all_runs))
    if summary.quiet_runs is not None:
        rows.append(_row("median", "quiet", summary.quiet_runs))
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def verdicts(summary: Summary, concurrency: int) -> list[str]:
    ratio, health = summary.judged["ratio"], summary.judged["health_p99_ms"]
    return [
        f"judged on the {summary.basis}",
        f"target HTTP/in-process >= {TARGET_RATIO:.2f} at {concurrency} streams: "
        + ("-" if ratio is None else f"{ratio:.3f} {'PASS' if ratio >= TARGET_RATIO else 'FAIL'}"),
        f"target /health p99 < {TARGET_HEALTH_P99_MS:.0f} ms while saturated: "
        + ("-" if health is None else f"{health:.1f} ms {'PASS' if health < TARGET_HEALTH_P99_MS else 'FAIL'}"),
    ]


# -- command ------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    defaults = Scheduler()
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"GGUF file or OpenVINO IR folder (default {DEFAULT_MODEL})")
    p.add_argument(
        "--url",
        help="bench an engine already running at this base URL instead of starting one; it keeps running "
        "during the in-process side, and its scheduler settings are its own",
    )
    p.add_argument("--concurrency", type=int, default=32, help="concurrent streaming requests (default 32)")
    p.add_argument("--max-tokens", type=int, default=128, help="new tokens per request, ignore_eos (default 128)")
    p.add_argument("--repeats", type=int, default=6, help="HTTP/in-process pairs, alternating order (default 6)")
    p.add_argument(
        "--quiet-steal-pct",
        type=float,
        default=QUIET_STEAL_PCT,
        help="a pair is quiet when both sides lost at most this much CPU to steal; targets are judged on the "
        "quiet pairs when there are two or more (default 5)",
    )
    p.add_argument("--warmup-requests", type=int, default=4, help="warm-up requests before each side (default 4)")
    p.add_argument(
        "--health-interval-ms", type=float, default=100.0, help="/health poll interval under load (default 100)"
    )
    p.add_argument("--results-dir", type=Path, default=Path("bench-results"), help="where JSON results go")
    p.add_argument("--startup-timeout-s", type=float, default=300.0, help="seconds allowed for the server to start")
    p.add_argument(
        "--shared-prefix",
        action="store_true",
        help="instead: --concurrency requests sharing one long system prompt, each with its own question, "
        "through the engine with prefix caching off and on (TTFT in one run; the in-process side is skipped)",
    )
    p.add_argument("--shared-prefix-len", type=int, default=1024, help="system prompt tokens (default 1024)")
    g = p.add_argument_group("scheduler (both sides)")
    g.add_argument("--cache-size", type=int, default=defaults.cache_size, help="KV cache size in GB")
    g.add_argument("--max-num-seqs", type=int, default=defaults.max_num_seqs)
    g.add_argument("--max-num-batched-tokens", type=int, default=defaults.max_num_batched_tokens)
    g.add_argument("--dynamic-split-fuse", action=argparse.BooleanOptionalAction, default=defaults.dynamic_split_fuse)
    g.add_argument(
        "--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=defaults.enable_prefix_caching
    )
    g.add_argument("--plugin-config", type=json.loads, default={}, help="OpenVINO plugin config as JSON")


def _check(args: argparse.Namespace) -> str | None:
    for name in ("concurrency", "max_tokens", "repeats"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1"
    if not Path(args.model).exists():
        return f"model {args.model!r} does not exist (run 'make model')"
    return None


def _http_side(args: argparse.Namespace, workload: Workload, endpoint: Endpoint, pid: int | None) -> HttpResult:
    http = asyncio.run(_http_phase(endpoint, workload, args.health_interval_ms / 1000.0, pid))
    say(
        f"http: {http.tokens_per_s:.1f} tok/s, steal {_fmt(http.steal_percent)}%, other CPU {_fmt(http.other_percent)}%"
    )
    return http


def _in_process_side(ceiling: Ceiling) -> InProcessResult:
    inproc = ceiling.measure()
    say(
        f"in-process: {inproc.tokens_per_s:.1f} tok/s, steal {_fmt(inproc.steal_percent)}%, "
        f"other CPU {_fmt(inproc.other_percent)}%"
    )
    return inproc


def run(args: argparse.Namespace) -> int:
    problem = _check(args)
    if problem:
        print(f"genmesh-bench engine: {problem}", file=sys.stderr)
        return 2
    scheduler = Scheduler(
        cache_size=args.cache_size,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        dynamic_split_fuse=args.dynamic_split_fuse,
        enable_prefix_caching=args.enable_prefix_caching,
        plugin_config=args.plugin_config,
    )
    if args.shared_prefix:
        return shared_prefix.run(args, scheduler)
    workload = Workload(
        prompts=tuple(default_prompts(args.concurrency)),
        max_tokens=args.max_tokens,
        warmup_requests=min(args.warmup_requests, args.concurrency),
    )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    args.results_dir.mkdir(parents=True, exist_ok=True)
    say(
        f"bench engine: {args.concurrency} streams x {args.max_tokens} tokens, {args.repeats} run(s), "
        f"model {args.model}, scheduler {scheduler}"
    )
    runs: list[RunResult] = []
    log_path = args.results_dir / f"engine-{stamp}-server.log"
    with http_server(args, scheduler, log_path) as (url, pid), Ceiling(args.model, scheduler, workload) as ceiling:
        endpoint = asyncio.run(_warm_up(url, workload))
        for i in range(1, args.repeats + 1):
            order = ["http", "in-process"] if i % 2 else ["in-process", "http"]
            say(f"run {i}/{args.repeats}: {' then '.join(order)}")
            if i % 2:
                http = _http_side(args, workload, endpoint, pid)
                inproc = _in_process_side(ceiling)
            else:
                inproc = _in_process_side(ceiling)
                http = _http_side(args, workload, endpoint, pid)
            runs.append(RunResult(i, order, http, inproc))

    summary = summary_of(runs, args.quiet_steal_pct)
    print(render_table(runs, summary))
    for line in verdicts(summary, args.concurrency):
        print(line)
    errors = [e for r in runs for e in r.http.errors]
    if errors:
        print(f"{len(errors)} HTTP request(s) failed, first: {errors[0]}")
    out = args.results_dir / f"engine-{stamp}.json"
    out.write_text(json.dumps(_document(args, scheduler, workload, runs, summary), indent=2) + "\n")
    print(f"results: {out}")
    return 1 if errors else 0


def _document(
    args: argparse.Namespace,
    scheduler: Scheduler,
    workload: Workload,
    runs: Sequence[RunResult],
    summary: Summary,
) -> dict[str, Any]:
    import openvino_genai as ov_genai

    return {
        "benchmark": "engine",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "openvino_genai": ov_genai.__version__,
        "model": args.model,
        "url": args.url,
        "scheduler": dataclasses.asdict(scheduler),
        "workload": {
            "concurrency": workload.concurrency,
            "max_tokens": workload.max_tokens,
            "greedy": True,
            "ignore_eos": True,
            "warmup_requests": workload.warmup_requests,
            "warmup_max_tokens": workload.warmup_max_tokens,
            "health_interval_ms": args.health_interval_ms,
            "prompts": list(workload.prompts),
        },
        "runs": [
            {
                "run": r.run,
                "order": r.order,
                "ratio": r.ratio,
                "quiet": is_quiet(r.steals, summary.max_steal_pct),
                "http": dataclasses.asdict(r.http),
                "in_process": {**dataclasses.asdict(r.in_process), "tokens_per_s": r.in_process.tokens_per_s},
            }
            for r in runs
        ],
        "median": summary.all_runs,
        "median_quiet": summary.quiet_runs,
        "quiet_steal_pct": summary.max_steal_pct,
        "targets": {
            "judged_on": summary.basis,
            "ratio_min": TARGET_RATIO,
            "health_p99_ms_max": TARGET_HEALTH_P99_MS,
            "ratio_met": (ratio := summary.judged["ratio"]) is not None and ratio >= TARGET_RATIO,
            "health_met": (health := summary.judged["health_p99_ms"]) is not None and health < TARGET_HEALTH_P99_MS,
        },
    }


def build_parser(prog: str = "genmesh-bench engine") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser("python -m genmesh.bench.engine").parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
