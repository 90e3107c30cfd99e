"""What the microservice hop costs: N concurrent streams through it vs straight to the engine, side by side.

``python -m genmesh.microservice.bench --model models/SmolLM2-135M-Instruct.Q4_1.gguf``
starts an engine and a microservice in front of it (or uses ``--engine-url`` and
``--microservice-url``), then runs rounds of ``--concurrency`` streaming chat requests
against each target, alternating which goes first, so that machine noise lands on both.
It reports output-token throughput, the throughput ratio, time to first token (first
generated text) p50/p99 and what the hop adds, with the CPU steal time of each batch read
from ``/proc/stat``. Needs the engine package installed (the development venv has it).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from httpx_sse import aconnect_sse

DEFAULT_MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class Batch:
    target: str
    wall_s: float
    tokens: int
    ttfts: list[float]
    steal: float
    errors: int
    load: float  # 1-minute load average at the end (other work on the machine)
    ms_cpu_s: float  # CPU seconds the microservice process used during the batch (nan when unknown)

    @property
    def throughput(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class Totals:
    batches: list[Batch] = field(default_factory=list)

    def throughput(self) -> float:
        wall = sum(b.wall_s for b in self.batches)
        return sum(b.tokens for b in self.batches) / wall if wall else 0.0

    def ttfts(self) -> list[float]:
        return [t for b in self.batches for t in b.ttfts]

    def steal(self) -> float:
        return statistics.fmean(b.steal for b in self.batches) if self.batches else 0.0


def cpu_times() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs from /proc/stat; (0, 0) where there is none.

    A procfs read served from kernel memory: read inline at batch edges on purpose.
    """
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return 0, 0
    values = [int(v) for v in fields[1:]]
    steal = values[7] if len(values) > 7 else 0
    # guest and guest_nice are already counted in user and nice.
    return steal, sum(values[:8])


def process_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of one process from /proc/PID/stat (nan when unknown)."""
    if pid is None:
        return math.nan
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(0, math.ceil(q / 100 * len(ordered)) - 1)
    return ordered[rank]


async def one_stream(client: httpx.AsyncClient, url: str, body: dict[str, object]) -> tuple[float | None, int]:
    """Returns (seconds to the first generated text, completion tokens)."""
    started = time.perf_counter()
    ttft: float | None = None
    tokens = 0
    async with aconnect_sse(client, "POST", url, json=body) as source:
        source.response.raise_for_status()
        async for event in source.aiter_sse():
            if event.data == "[DONE]":
                break
            chunk = json.loads(event.data)
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
            if ttft is None and chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                ttft = time.perf_counter() - started
    return ttft, tokens


async def batch(
    client: httpx.AsyncClient, target: str, base_url: str, concurrency: int, max_tokens: int, ms_pid: int | None
) -> Batch:
    url = base_url + "/v1/chat/completions"
    bodies = [
        {
            "messages": [{"role": "user", "content": f"Write a short story about a robot, number {i}."}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        for i in range(concurrency)
    ]
    steal0, total0 = cpu_times()
    ms_cpu0 = process_cpu_s(ms_pid)
    started = time.perf_counter()
    results = await asyncio.gather(*(one_stream(client, url, b) for b in bodies), return_exceptions=True)
    wall = time.perf_counter() - started
    steal1, total1 = cpu_times()
    ms_cpu1 = process_cpu_s(ms_pid)
    ok = [r for r in results if not isinstance(r, BaseException)]
    return Batch(
        target=target,
        wall_s=wall,
        tokens=sum(tokens for _, tokens in ok),
        ttfts=[t for t, _ in ok if t is not None],
        steal=(steal1 - steal0) / (total1 - total0) if total1 > total0 else 0.0,
        errors=len(results) - len(ok),
        load=os.getloadavg()[0],
        ms_cpu_s=ms_cpu1 - ms_cpu0,
    )


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not healthy after {timeout_s:.0f} s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Summary:
    concurrency: int
    max_tokens: int
    rounds: int
    throughput_tok_s: dict[str, float]
    throughput_ratio: float
    throughput_ratio_per_round: list[float]
    ttft_p50_s: dict[str, float]
    ttft_p99_s: dict[str, float]
    added_ttft_p50_s: float
    added_ttft_p99_s: float
    cpu_steal: dict[str, float]
    microservice_cpu_ms_per_token: float
    errors: dict[str, int]


def summarise(args: argparse.Namespace, totals: dict[str, Totals], pairs: list[tuple[Batch, Batch]]) -> Summary:
    ms, direct = totals["microservice"], totals["engine"]
    p50 = {name: percentile(t.ttfts(), 50) for name, t in totals.items()}
    p99 = {name: percentile(t.ttfts(), 99) for name, t in totals.items()}
    return Summary(
        concurrency=args.concurrency,
        max_tokens=args.max_tokens,
        rounds=args.rounds,
        throughput_tok_s={name: t.throughput() for name, t in totals.items()},
        throughput_ratio=ms.throughput() / direct.throughput() if direct.throughput() else math.nan,
        throughput_ratio_per_round=[m.throughput / d.throughput for m, d in pairs if d.throughput > 0],
        ttft_p50_s=p50,
        ttft_p99_s=p99,
        added_ttft_p50_s=p50["microservice"] - p50["engine"],
        added_ttft_p99_s=p99["microservice"] - p99["engine"],
        cpu_steal={name: t.steal() for name, t in totals.items()},
        microservice_cpu_ms_per_token=1000
        * sum(b.ms_cpu_s for b in ms.batches)
        / max(1, sum(b.tokens for b in ms.batches)),
        errors={name: sum(b.errors for b in t.batches) for name, t in totals.items()},
    )


def print_report(summary: Summary, batches: list[Batch]) -> None:
    print(
        f"{'round target':<24}{'tok/s':>9}{'TTFT p50':>10}{'TTFT p99':>10}{'steal':>8}{'load':>6}"
        f"{'ms CPU':>8}{'errors':>8}"
    )
    for b in batches:
        print(
            f"{b.target:<24}{b.throughput:>9.1f}{percentile(b.ttfts, 50) * 1000:>8.0f}ms"
            f"{percentile(b.ttfts, 99) * 1000:>8.0f}ms{b.steal * 100:>7.1f}%{b.load:>6.1f}"
            f"{b.ms_cpu_s:>7.2f}s{b.errors:>8}"
        )
    print()
    for name in ("engine", "microservice"):
        print(
            f"{name:<13} {summary.throughput_tok_s[name]:7.1f} tok/s"
            f"   TTFT p50 {summary.ttft_p50_s[name] * 1000:6.0f} ms   p99 {summary.ttft_p99_s[name] * 1000:6.0f} ms"
            f"   CPU steal {summary.cpu_steal[name] * 100:4.1f}%"
        )
    ratios = " ".join(f"{r:.3f}" for r in summary.throughput_ratio_per_round)
    print(f"throughput ratio microservice/engine: {summary.throughput_ratio:.3f} (per round: {ratios})")
    print(f"added TTFT: p50 {summary.added_ttft_p50_s * 1000:+.0f} ms, p99 {summary.added_ttft_p99_s * 1000:+.0f} ms")


async def measure(args: argparse.Namespace, targets: dict[str, str], ms_pid: int | None) -> Summary:
    totals = {name: Totals() for name in targets}
    batches: list[Batch] = []
    pairs: list[tuple[Batch, Batch]] = []
    limits = httpx.Limits(max_connections=args.concurrency * 2, max_keepalive_connections=args.concurrency * 2)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600, connect=5), limits=limits) as client:
        for name, url in targets.items():  # warm-up: connections, caches, first-request costs
            await batch(client, name, url, min(4, args.concurrency), 8, ms_pid)
        for r in range(args.rounds):
            order = ["microservice", "engine"] if r % 2 == 0 else ["engine", "microservice"]
            done: dict[str, Batch] = {}
            for name in order:
                b = await batch(client, name, targets[name], args.concurrency, args.max_tokens, ms_pid)
                b.target = f"{r + 1} {name}"
                done[name] = b
                batches.append(b)
                totals[name].batches.append(b)
            pairs.append((done["microservice"], done["engine"]))
    summary = summarise(args, totals, pairs)
    print_report(summary, batches)
    return summary


def run(args: argparse.Namespace) -> Summary:
    procs: list[subprocess.Popen[bytes]] = []
    engine_url, ms_url = args.engine_url, args.microservice_url
    ms_pid: int | None = None
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        if engine_url is None:
            port = free_port()
            argv = [sys.executable, "-m", "genmesh.engine", "--model", args.model, "--port", str(port)]
            procs.append(start([*argv, "--stats-log-interval-s", "0"], log_dir / "bench-engine.log"))
            engine_url = f"http://127.0.0.1:{port}"
            wait_healthy(engine_url + "/health", procs[-1], 600)
        if ms_url is None:
            port = free_port()
            argv = [sys.executable, "-m", "genmesh.microservice", "--llm-endpoint", engine_url, "--port", str(port)]
            procs.append(start([*argv, "--log-level", "warning"], log_dir / "bench-microservice.log"))
            ms_url = f"http://127.0.0.1:{port}"
            ms_pid = procs[-1].pid
            wait_healthy(ms_url + "/v1/health_check", procs[-1], 60)
        return asyncio.run(measure(args, {"engine": engine_url, "microservice": ms_url}, ms_pid))
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m genmesh.microservice.bench",
        description="Concurrent streams through the microservice vs straight to the engine, side by side.",
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="model for the engine this starts")
    p.add_argument("--engine-url", help="use this running engine instead of starting one")
    p.add_argument("--microservice-url", help="use this running microservice (in front of --engine-url)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=4, help="batches per target, alternating which goes first")
    p.add_argument("--log-dir", default="bench-results/microservice", help="where the started servers write their logs")
    p.add_argument("--json", dest="json_out", help="also write the summary to this JSON file")
    args = p.parse_args(argv)
    if args.microservice_url and not args.engine_url:
        p.error("--microservice-url needs --engine-url (the engine it relays to)")
    summary = run(args)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(dataclasses.asdict(summary), indent=2))
    return 1 if any(summary.errors.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
