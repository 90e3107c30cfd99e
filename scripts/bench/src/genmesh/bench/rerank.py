"""``genmesh-bench rerank``: rerank throughput (query+document pairs per second) and latency p50/p99
at several concurrencies (default c=1 and c=8), against the engine serving a cross-encoder and,
where given, a peer serving the same folder (``--peer-url``, e.g. ``scripts/st_rerank_server.py``:
sentence-transformers' ``CrossEncoder`` on PyTorch CPU). Each request ranks ``--documents``
documents of ``--doc-tokens`` tokens against one query. Closed loop: ``c`` clients send requests
back to back for ``--duration-s``; the targets take turns in ``--rounds`` interleaved rounds and
throughput is the median round. Before the rounds, one request's scores from both targets are
compared (largest difference). Without ``--base-url`` a private engine serving ``--rerank-model``
is started; the default folder is the test cross-encoder (``cross_encoder_folder``: MiniLM's
encoder and a random head), made on first use."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from genmesh.engine.settings import DEFAULT_MODEL

from .cross_encoder_folder import make_cross_encoder
from .embeddings import text_of
from .load import closed_loop, session
from .render import say
from .results import describe, save
from .servers import start_engine

MODEL = "cross-encoder"
QUERY = "which server batches requests for the model"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", help="a running engine serving the cross-encoder (default: start one)")
    p.add_argument(
        "--rerank-model",
        type=Path,
        default=Path("bench-results/test-cross-encoder"),
        help="cross-encoder folder for the private engine (made from models/all-MiniLM-L6-v2 if missing)",
    )
    p.add_argument("--model", default=MODEL, help="model id to send")
    p.add_argument("--peer-url", help="a peer serving /v1/rerank on the same folder (scripts/st_rerank_server.py)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument("--documents", type=int, default=8, help="documents per request")
    p.add_argument("--doc-tokens", type=int, default=64, help="tokens per document")
    p.add_argument("--duration-s", type=float, default=10.0, help="seconds per target and concurrency")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (throughput: the median)")
    p.add_argument("--result-dir", type=Path, default=Path("bench-results"))


def _body(args: argparse.Namespace, salt: int) -> dict[str, Any]:
    docs = [text_of(args.doc_tokens, salt + i) for i in range(args.documents)]
    return {"model": args.model, "query": QUERY, "documents": docs, "return_documents": False}


async def _scores(http: aiohttp.ClientSession, args: argparse.Namespace) -> list[float]:
    async with http.post("/v1/rerank", json=_body(args, 0)) as r:
        reply = await r.json()
    by_index = {x["index"]: x["relevance_score"] for x in reply["results"]}
    return [by_index[i] for i in range(args.documents)]


async def _level(url: str, args: argparse.Namespace, concurrency: int) -> dict[str, float]:
    def body(k: int, n: int) -> dict[str, Any]:
        return _body(args, 97 * k + n)

    served = await closed_loop(url, "/v1/rerank", body, concurrency, args.duration_s)
    return served.summary("pairs_per_s", per_request=args.documents)


async def _measure(targets: dict[str, str], args: argparse.Namespace) -> tuple[list[dict[str, Any]], float | None]:
    scores = {}
    for name, url in targets.items():
        async with session(url, 1) as http:
            scores[name] = await _scores(http, args)  # also the warm-up
    gap = max(abs(a - b) for a, b in zip(*scores.values(), strict=True)) if len(scores) == 2 else None
    rows: list[dict[str, Any]] = []
    for c in args.concurrency:
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        for _ in range(args.rounds):
            for name, url in targets.items():
                rounds[name].append(await _level(url, args, c))
        for name, got in rounds.items():
            row: dict[str, Any] = {"target": name, "concurrency": c}
            for key in ("pairs_per_s", "p50_ms", "p99_ms"):
                row[key] = statistics.median(r[key] for r in got)
            row["failed"] = sum(int(r["failed"]) for r in got)
            rows.append(row)
    return rows, gap


def table(rows: list[dict[str, Any]]) -> str:
    base = {r["concurrency"]: r["pairs_per_s"] for r in rows if r["target"] == "genmesh"}
    lines = ["| target | c | pairs/s | p50 ms | p99 ms | genmesh / this |", "|---|---|---|---|---|---|"]
    for r in rows:
        ratio = base.get(r["concurrency"], 0.0) / r["pairs_per_s"] if r["pairs_per_s"] else 0.0
        lines.append(
            f"| {r['target']} | {r['concurrency']} | {r['pairs_per_s']:.1f} | {r['p50_ms']:.1f} "
            f"| {r['p99_ms']:.1f} | {ratio:.2f} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        url = args.base_url
        if url is None:
            folder = args.rerank_model
            if not (folder / "model.safetensors").is_file():
                say(f"rerank: making the test cross-encoder in {folder}")
                make_cross_encoder(Path("models/all-MiniLM-L6-v2"), folder)
            logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="genmesh-bench-rerank-")))
            say("rerank: starting a private engine (chat model + cross-encoder)")
            extra = ["--rerank-model", str(folder), "--rerank-model-name", args.model, "--cache-size", "1"]
            url = stack.enter_context(start_engine(DEFAULT_MODEL, logs / "engine.log", extra=extra)).url
        targets = {"genmesh": url.rstrip("/")}
        if args.peer_url:
            targets["peer"] = args.peer_url.rstrip("/")
        rows, gap = asyncio.run(_measure(targets, args))
    host = describe()
    print(f"\nRerank ({args.model}: {args.documents} documents x {args.doc_tokens} tokens per request), ", end="")
    print(f"CPU: {host['cpu']} ({host['cores']} cores)\n")
    print(table(rows))
    if gap is not None:
        print(f"\nlargest score difference, genmesh vs peer, on one request: {gap:.2e}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    saved = save({"host": host, "rows": rows, "score_gap": gap}, args.result_dir / f"rerank-{stamp}.json")
    print(f"results: {saved}")
    return 1 if any(r["failed"] for r in rows) else 0
