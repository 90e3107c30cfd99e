"""The cost of serving the GGUF's own model: load time, memory and throughput, before and after.

``python -m genmesh.accuracy.cost`` starts the engine on the default model in two ways, in
interleaved rounds on this machine: *before* (``--no-gguf-reencode --max-num-scoring-seqs 0``:
OpenVINO GenAI reads the Q4_1 file itself, no scorer, as the engine did until now) and *after*
(the defaults: the F16 re-encoding, made beforehand by ``make model``, and the scorer), and
*f16* (the re-encoding without the scorer, to tell the two costs apart). Each
round measures the time until ``/health`` answers 200, the resident memory of the engine's
processes (API and core) after a warm-up, and output tokens per second with 1 and with 32
concurrent greedy requests of 64 tokens each. It prints the medians and the after/before ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import httpx
import psutil

from genmesh.bench.machine import cpu_model
from genmesh.bench.server import ManagedServer, free_port, http_ok

ROOT = Path(__file__).resolve().parents[5]
MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
MODES = {
    "before": ["--no-gguf-reencode", "--max-num-scoring-seqs", "0"],
    "f16": ["--max-num-scoring-seqs", "0"],  # the faithful weights alone, without the scorer
    "after": [],
}
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


async def throughput(url: str, concurrency: int, requests: int, tokens: int) -> float:
    body = {"prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    done = 0
    queue = list(range(requests))

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal done
        while queue:
            queue.pop()
            r = await client.post(f"{url}/v1/completions", json=body)
            r.raise_for_status()
            done += int(r.json()["usage"]["completion_tokens"])

    start = time.perf_counter()
    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return done / (time.perf_counter() - start)


def rss_mib(proc: psutil.Process) -> float:
    procs = [proc, *proc.children(recursive=True)]
    return sum(p.memory_info().rss for p in procs if p.is_running()) / 2**20


def one_round(mode: str, log_dir: Path, tokens: int) -> dict[str, float]:
    port = free_port()
    argv = [sys.executable, "-m", "genmesh.engine", "--model", str(ROOT / MODEL), "--port", str(port), *MODES[mode]]
    url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    server = ManagedServer.start(f"engine-{mode}", argv, url, http_ok(f"{url}/health"), log_dir / f"{mode}.log")
    load_s = time.perf_counter() - started
    try:
        asyncio.run(throughput(url, 4, 4, 16))  # warm-up
        rss = rss_mib(psutil.Process(server.proc.pid))
        c1 = asyncio.run(throughput(url, 1, 4, tokens))
        c32 = asyncio.run(throughput(url, 32, 64, tokens))
    finally:
        server.stop()
    return {"load_s": load_s, "rss_mib": rss, "tok_s_c1": c1, "tok_s_c32": c32}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Cost of the faithful model: before/after in one run.")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds per mode")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--log-dir", type=Path, default=ROOT / ".run" / "cost")
    args = p.parse_args(argv)
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in MODES:
            got = one_round(mode, args.log_dir, args.tokens)
            results[mode].append(got)
            print(f"round {r + 1} {mode:6s} " + "  ".join(f"{k} {v:.1f}" for k, v in got.items()), flush=True)
    print(f"\nCPU: {cpu_model()}; median of {args.rounds} interleaved rounds")
    print(f"{'':12s} {'before':>10s} {'f16':>10s} {'after':>10s} {'f16/before':>11s} {'after/before':>13s}")
    for key in ("load_s", "rss_mib", "tok_s_c1", "tok_s_c32"):
        m = {mode: statistics.median(x[key] for x in results[mode]) for mode in MODES}
        b = m["before"]
        print(f"{key:12s} {b:10.1f} {m['f16']:10.1f} {m['after']:10.1f} {m['f16'] / b:11.2f} {m['after'] / b:13.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
