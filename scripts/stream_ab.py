"""Two OpenAI-compatible servers, one stream at a time, alternating request by request: time per output token
(from the first content chunk to the stream's end) and time to first token of each, and the median of the
per-request TPOT ratios A/B (< 1: A decodes faster). A new connection per request (llama-server closes idle
keep-alive connections). Used for docs/int8-avx2.md ("One stream against llama-server").

    .venv/bin/python scripts/stream_ab.py http://127.0.0.1:18100 http://127.0.0.1:18103 --requests 24
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx

SUBJECTS = ("fish", "boat", "whale", "crab", "storm", "diver", "shell", "wave", "gull", "pirate")


def one(url: str, model: str, prompt: str, max_tokens: int) -> tuple[float, float]:
    """(TTFT ms, TPOT ms) of one greedy streamed chat request of ``max_tokens`` tokens."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    started, first, tokens = time.perf_counter(), None, 0
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                first = time.perf_counter()
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    end = time.perf_counter()
    if first is None or tokens < 2:
        raise RuntimeError(f"{url}: no tokens streamed")
    return (first - started) * 1e3, (end - first) * 1e3 / (tokens - 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--requests", type=int, default=24, help="per server")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--model", default="SmolLM2-135M-Instruct")
    args = p.parse_args()
    got: dict[str, list[tuple[float, float]]] = {args.a: [], args.b: []}
    for i in range(args.requests):
        prompt = f"Write a short story about a {SUBJECTS[i % len(SUBJECTS)]} in the sea."
        for url in (args.a, args.b) if i % 2 == 0 else (args.b, args.a):
            got[url].append(one(url, args.model, prompt, args.max_tokens))
    for url, runs in got.items():
        ttft = statistics.median(r[0] for r in runs)
        tpot = statistics.median(r[1] for r in runs)
        print(f"{url}: TTFT p50 {ttft:.1f} ms, TPOT p50 {tpot:.2f} ms")
    ratios = [a[1] / b[1] for a, b in zip(got[args.a], got[args.b], strict=True)]
    print(f"TPOT A/B, median of per-request ratios: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
