"""``genmesh-bench embeddings``: embeddings throughput (inputs/s) and latency p50/p99 at several
concurrencies, with short (16-token) and long (256-token) inputs, against the engine and, where
given, a peer (``--peer-url``, e.g. ``scripts/st_embeddings_server.py``: sentence-transformers on
PyTorch CPU). Closed loop: ``c`` clients each send one input per request, back to back, for
``--duration-s``; the targets take turns in ``--rounds`` interleaved rounds and throughput is the
median round. Without ``--base-url`` a private engine serving all-MiniLM-L6-v2 is started.

``--chat-cost`` measures what serving embeddings beside the chat model costs the chat model: chat
output tok/s (``--chat-concurrency`` streams) in interleaved rounds on (a) a private engine serving
the chat model alone, (b) the engine serving both models, the embedding model idle, and (c) that
engine while ``--chat-cost-embed-concurrency`` clients send short embeddings the whole time."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from genmesh.engine.settings import DEFAULT_MODEL

from .datasets import chat_batch
from .load import Endpoint, closed_loop, measure, session
from .render import chat_cost_table, say
from .results import describe, save
from .servers import MODEL_NAME, start_engine

# The chat-cost table's last column: its title, the row key and its decimals.
CHAT_COST_BESIDE = ("embeddings/s beside", "embeddings_per_s", 1)

MODEL = "all-MiniLM-L6-v2"
# one token per word for this model's WordPiece: [CLS] + words + [SEP]
LENGTHS = {"short": 16, "long": 256}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", help="a running engine (default: start one with --embedding-model)")
    p.add_argument("--embedding-model", default=f"models/{MODEL}", help="checkpoint folder for the private engine")
    p.add_argument("--model", default=MODEL, help="model id to send")
    p.add_argument("--peer-url", help="a peer serving /v1/embeddings (scripts/st_embeddings_server.py)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--lengths", nargs="+", choices=list(LENGTHS), default=list(LENGTHS))
    p.add_argument("--duration-s", type=float, default=10.0, help="seconds per target, length and concurrency")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (throughput: the median)")
    p.add_argument("--result-dir", type=Path, default=Path("bench-results"))
    p.add_argument("--chat-cost", action="store_true", help="also measure the cost to the chat model's throughput")
    p.add_argument("--chat-concurrency", type=int, default=8, help="chat streams in the --chat-cost rounds")
    p.add_argument("--chat-requests", type=int, default=48, help="chat requests per --chat-cost round")
    p.add_argument("--chat-max-tokens", type=int, default=64, help="tokens per chat request (ignore_eos)")
    p.add_argument("--chat-cost-embed-concurrency", type=int, default=4, help="embedding clients beside chat in (c)")


def text_of(tokens: int, salt: int) -> str:
    words = ["vector", "search", "model", "token", "batch", "server", "query", "answer"]
    return " ".join(words[(salt + i) % len(words)] for i in range(tokens - 2))


async def _level(url: str, model: str, tokens: int, concurrency: int, duration_s: float) -> dict[str, float]:
    def body(k: int, n: int) -> dict[str, Any]:
        return {"model": model, "input": [text_of(tokens, k + n)], "encoding_format": "base64"}

    return (await closed_loop(url, "/v1/embeddings", body, concurrency, duration_s)).summary("inputs_per_s")


async def _measure(targets: dict[str, str], args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for length in args.lengths:
        for c in args.concurrency:
            rounds: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
            for _ in range(args.rounds):
                for name, url in targets.items():
                    rounds[name].append(await _level(url, args.model, LENGTHS[length], c, args.duration_s))
            for name, got in rounds.items():
                row = {"target": name, "length": length, "tokens": LENGTHS[length], "concurrency": c}
                row["inputs_per_s"] = statistics.median(r["inputs_per_s"] for r in got)
                row["p50_ms"] = statistics.median(r["p50_ms"] for r in got)
                row["p99_ms"] = statistics.median(r["p99_ms"] for r in got)
                row["failed"] = sum(int(r["failed"]) for r in got)
                rows.append(row)
    return rows


async def _embed_until(url: str, model: str, concurrency: int, stop: asyncio.Event) -> int:
    """Short embeddings from ``concurrency`` clients until ``stop``; how many were served."""
    served = 0
    async with session(url, concurrency) as http:

        async def client(k: int) -> None:
            nonlocal served
            n = 0
            while not stop.is_set():
                body = {"model": model, "input": [text_of(LENGTHS["short"], k + n)], "encoding_format": "base64"}
                async with http.post("/v1/embeddings", json=body) as r:
                    await r.read()
                    served += r.status == 200
                n += 1

        await asyncio.gather(*(client(k) for k in range(concurrency)))
    return served


async def _chat_round(url: str, args: argparse.Namespace, embed: bool) -> dict[str, float]:
    endpoint = Endpoint(url, model=MODEL_NAME)
    requests = chat_batch(args.chat_requests, args.chat_max_tokens)
    stop = asyncio.Event()
    beside = (
        asyncio.create_task(_embed_until(url, args.model, args.chat_cost_embed_concurrency, stop)) if embed else None
    )
    began = time.monotonic()
    try:
        result = await measure(endpoint, requests, max_concurrency=args.chat_concurrency)
    finally:
        stop.set()
        served = await beside if beside is not None else 0
    return {"tok_s": float(result["output_throughput"]), "embeddings_per_s": served / (time.monotonic() - began)}


async def _chat_cost(alone_url: str, both_url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    variants = {
        "chat model alone": (alone_url, False),
        "both models, embeddings idle": (both_url, False),
        f"both models, {args.chat_cost_embed_concurrency} embedding clients": (both_url, True),
    }
    for url, _ in variants.values():  # warm-up, not measured
        await measure(Endpoint(url, model=MODEL_NAME), chat_batch(4, 8), max_concurrency=4)
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (url, embed) in variants.items():
            rounds[name].append(await _chat_round(url, args, embed))
    first = {i: rounds["chat model alone"][i]["tok_s"] for i in range(args.rounds)}
    rows = []
    for name, got in rounds.items():
        rows.append(
            {
                "variant": name,
                "chat_tok_s": statistics.median(r["tok_s"] for r in got),
                "ratio": statistics.median(r["tok_s"] / first[i] for i, r in enumerate(got)),
                "embeddings_per_s": statistics.median(r["embeddings_per_s"] for r in got),
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    base = {(r["length"], r["concurrency"]): r["inputs_per_s"] for r in rows if r["target"] == "genmesh"}
    lines = ["| target | input | c | inputs/s | p50 ms | p99 ms | genmesh / this |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = base.get((r["length"], r["concurrency"]), 0.0) / r["inputs_per_s"] if r["inputs_per_s"] else 0.0
        lines.append(
            f"| {r['target']} | {r['length']} ({r['tokens']} tokens) | {r['concurrency']} | {r['inputs_per_s']:.1f} "
            f"| {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {ratio:.2f} |"
        )
    return "\n".join(lines)


def collect(args: argparse.Namespace, stack: contextlib.ExitStack) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows (genmesh, and the peer where given) and, with ``--chat-cost``, the chat-cost rows."""
    url = args.base_url
    if url is None:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="genmesh-bench-emb-")))
        say("embeddings: starting a private engine (chat model + embedding model)")
        extra = ["--embedding-model", args.embedding_model, "--cache-size", "1"]
        url = stack.enter_context(start_engine(DEFAULT_MODEL, logs / "engine.log", extra=extra)).url
    targets = {"genmesh": url.rstrip("/")}
    if args.peer_url:
        targets["peer"] = args.peer_url.rstrip("/")
    rows = asyncio.run(_measure(targets, args))
    cost: list[dict[str, Any]] = []
    if args.chat_cost:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="genmesh-bench-chat-")))
        say("embeddings: starting a private engine serving the chat model alone")
        alone = stack.enter_context(start_engine(DEFAULT_MODEL, logs / "engine-chat.log", extra=["--cache-size", "1"]))
        cost = asyncio.run(_chat_cost(alone.url, url.rstrip("/"), args))
    return rows, cost


def markdown(rows: list[dict[str, Any]], cost: list[dict[str, Any]], args: argparse.Namespace) -> str:
    blocks = [table(rows)]
    return "\n\n".join([*blocks, chat_cost_table(cost, args, *CHAT_COST_BESIDE)] if cost else blocks)


def run(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        rows, cost = collect(args, stack)
    host = describe()
    print(f"\nEmbeddings ({args.model}), CPU: {host['cpu']} ({host['cores']} cores)\n")
    print(markdown(rows, cost, args))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    saved = save({"host": host, "rows": rows, "chat_cost": cost}, args.result_dir / f"embeddings-{stamp}.json")
    print(f"results: {saved}")
    return 1 if any(r["failed"] for r in rows) else 0
