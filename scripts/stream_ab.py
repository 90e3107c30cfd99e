"""Two OpenAI-compatible servers, one stream at a time, alternating request by request: time per output token
(from the first content chunk to the stream's end) and time to first token of each, and the median of the
per-request TPOT ratios A/B (< 1: A decodes faster). The requests are the bench's own (``genmesh.bench.load.send``:
greedy, ``ignore_eos``, a keep-alive connection per server, re-sent once on one the server had closed). Used for
docs/int8-avx2.md ("One stream against llama-server").

    .venv/bin/python scripts/stream_ab.py http://127.0.0.1:18100 http://127.0.0.1:18103 --requests 24
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics

from genmesh.bench.datasets import RequestSpec
from genmesh.bench.load import Endpoint, send, session
from genmesh.bench.results import RequestOutput

SUBJECTS = ("fish", "boat", "whale", "crab", "storm", "diver", "shell", "wave", "gull", "pirate")


async def alternate(urls: tuple[str, str], model: str, n: int, max_tokens: int) -> dict[str, list[RequestOutput]]:
    got: dict[str, list[RequestOutput]] = {url: [] for url in urls}
    async with contextlib.AsyncExitStack() as stack:
        clients = {url: await stack.enter_async_context(session(url, 1)) for url in urls}
        for i in range(n):
            req = RequestSpec(f"Write a short story about a {SUBJECTS[i % len(SUBJECTS)]} in the sea.", 0, max_tokens)
            for url in urls if i % 2 == 0 else urls[::-1]:
                out = await send(clients[url], Endpoint(url, model), req)
                if out.tpot_s is None:
                    raise SystemExit(f"{url}: {out.error or 'fewer than 2 tokens streamed'}")
                got[url].append(out)
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--requests", type=int, default=24, help="per server")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--model", default="SmolLM2-135M-Instruct")
    args = p.parse_args()
    got = asyncio.run(alternate((args.a, args.b), args.model, args.requests, args.max_tokens))
    tpot = {url: [1e3 * (o.tpot_s or 0.0) for o in runs] for url, runs in got.items()}
    for url, runs in got.items():
        ttft = statistics.median(1e3 * (o.ttft_s or 0.0) for o in runs)
        print(f"{url}: TTFT p50 {ttft:.1f} ms, TPOT p50 {statistics.median(tpot[url]):.2f} ms")
    ratios = [a / b for a, b in zip(tpot[args.a], tpot[args.b], strict=True)]
    print(f"TPOT A/B, median of per-request ratios: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
