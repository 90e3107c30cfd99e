"""The cost of serving the GGUF's own model: load time, memory and throughput, before and after.

``python -m genmesh.accuracy.cost`` starts the engine on the default model in two ways, in
interleaved rounds on this machine: *before* (``--no-gguf-reencode --max-num-scoring-seqs 0``:
OpenVINO GenAI reads the Q4_1 file itself, no scorer, as the engine did until now) and *after*
(the defaults: the F16 re-encoding, made beforehand by ``make model``, and the scorer). Each
round measures the time until ``/health`` answers 200, the resident memory of the engine's
processes (API and core) after a warm-up, and output tokens per second with 1 and with 32
concurrent greedy requests of 64 tokens each, then the resident memory again after one scoring
request (the scorer compiles on first use). It prints the medians and the after/before ratios.
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

from genmesh.bench.results import describe
from genmesh.bench.servers import PORT, start

ROOT = Path(__file__).resolve().parents[5]
MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
MODES = {"before": ["--no-gguf-reencode", "--max-num-scoring-seqs", "0"], "after": []}
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
    argv = [sys.executable, "-m", "genmesh.engine", "--model", str(ROOT / MODEL), "--port", PORT, *MODES[mode]]
    started = time.perf_counter()
    server = start(f"engine-{mode}", argv, log_dir / f"{mode}.log", timeout_s=600)
    load_s = time.perf_counter() - started
    url = server.url
    try:
        asyncio.run(throughput(url, 4, 4, 16))  # warm-up
        rss = rss_mib(psutil.Process(server.proc.pid))
        c1 = asyncio.run(throughput(url, 1, 6, tokens))
        c32 = asyncio.run(throughput(url, 32, 96, tokens))
        scored = {"prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 1}
        if httpx.post(f"{url}/v1/completions", json=scored, timeout=120).status_code == 200:
            rss_scored = rss_mib(psutil.Process(server.proc.pid))
        else:  # scorer off (before): nothing more to load
            rss_scored = rss
    finally:
        server.stop()
    return {"load_s": load_s, "rss_mib": rss, "tok_s_c1": c1, "tok_s_c32": c32, "rss_scored_mib": rss_scored}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Cost of the faithful model: before/after in one run.")
    p.add_argument("--rounds", type=int, default=4, help="interleaved rounds per mode")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--log-dir", type=Path, default=ROOT / ".run" / "cost")
    args = p.parse_args(argv)
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in MODES:
            got = one_round(mode, args.log_dir, args.tokens)
            results[mode].append(got)
            print(f"round {r + 1} {mode:6s} " + "  ".join(f"{k} {v:.1f}" for k, v in got.items()), flush=True)
    print(f"\nCPU: {describe()['cpu']}; median of {args.rounds} interleaved rounds")
    print(f"{'':15s} {'before':>10s} {'after':>10s} {'after/before':>13s}")
    for key in ("load_s", "rss_mib", "rss_scored_mib", "tok_s_c1", "tok_s_c32"):
        before = statistics.median(x[key] for x in results["before"])
        after = statistics.median(x[key] for x in results["after"])
        print(f"{key:15s} {before:10.1f} {after:10.1f} {after / before:13.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
