"""CPU time per generated token of running engines at one stream: the same greedy ``ignore_eos`` requests sent to
each in turn (rounds alternate the order), and each engine's own CPU seconds (its process and its children: the
pipeline's worker) divided by the tokens it generated. On a machine shared with other work this says which engine
does less work per token where wall-clock throughput cannot (its spinning threads still count; the measurement
includes prefill and HTTP).

    .venv/bin/python scripts/int8_probe/cpu_per_token.py new=http://127.0.0.1:18301@PID old=http://127.0.0.1:18302@PID
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import httpx
import psutil

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "they",
    "you",
    "were",
    "her",
    "she",
]


def cpu_seconds(pid: int) -> float:
    proc = psutil.Process(pid)
    return sum(sum(p.cpu_times()[:2]) for p in [proc, *proc.children(recursive=True)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("engines", nargs="+", metavar="NAME=URL@PID", help="an engine's base URL and process id")
    p.add_argument("--model", default="SmolLM2-135M-Instruct", help="the served model name")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--requests", type=int, default=4, help="sequential requests per engine and round")
    p.add_argument("--prompt-words", type=int, default=100)
    p.add_argument("--max-tokens", type=int, default=64)
    a = p.parse_args()
    engines = {
        name: (target.rsplit("@", 1)[0], int(target.rsplit("@", 1)[1]))
        for name, target in (e.split("=", 1) for e in a.engines)
    }
    rng = random.Random(1)
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in engines}
    with httpx.Client(timeout=300) as client:
        for rnd in range(a.rounds):
            prompts = [" ".join(rng.choice(WORDS) for _ in range(a.prompt_words)) for _ in range(a.requests)]
            for name in list(engines) if rnd % 2 == 0 else list(engines)[::-1]:
                url, pid = engines[name]
                cpu0, wall0, tokens = cpu_seconds(pid), time.perf_counter(), 0
                for prompt in prompts:
                    body = {
                        "model": a.model,
                        "prompt": prompt,
                        "max_tokens": a.max_tokens,
                        "temperature": 0,
                        "ignore_eos": True,
                    }
                    r = client.post(url + "/v1/completions", json=body)
                    r.raise_for_status()
                    tokens += r.json()["usage"]["completion_tokens"]
                cpu_ms, wall_ms = (cpu_seconds(pid) - cpu0) * 1e3 / tokens, (time.perf_counter() - wall0) * 1e3 / tokens
                figures[name].append((cpu_ms, wall_ms))
                print(f"round {rnd + 1} {name}: CPU {cpu_ms:.2f} ms/token, wall {wall_ms:.2f} ms/token", flush=True)
    for name, rows in figures.items():
        cpu = statistics.median(c for c, _ in rows)
        wall = statistics.median(w for _, w in rows)
        print(f"{name}: median CPU {cpu:.2f} ms/token, wall {wall:.2f} ms/token")


if __name__ == "__main__":
    main()
