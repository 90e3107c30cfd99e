#!/usr/bin/env python3
"""The rerank peer of ``genmesh-bench rerank``: sentence-transformers' ``CrossEncoder`` on PyTorch
CPU behind a minimal ``/v1/rerank`` (Cohere's body and reply). Lives in ``.venv-st`` (``make
st-peer``), never in the genmesh venvs.

    .venv-st/bin/python scripts/st_rerank_server.py --model /tmp/cross-encoder --port 8101

Pairs are batched dynamically: while one ``predict`` runs on the worker thread, the requests that
arrive queue up, and the next ``predict`` takes all their pairs (up to ``--max-batch``) at once."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import uvicorn
from fastapi import FastAPI
from sentence_transformers import CrossEncoder


class Batcher:
    def __init__(self, model: CrossEncoder, max_batch: int) -> None:
        self.model, self.max_batch = model, max_batch
        self.queue: asyncio.Queue[tuple[list[tuple[str, str]], asyncio.Future[Any]]] = asyncio.Queue()
        self.worker: asyncio.Task[None] | None = None

    async def predict(self, pairs: list[tuple[str, str]]) -> Any:
        if self.worker is None:
            self.worker = asyncio.create_task(self._run())
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self.queue.put((pairs, done))
        return await done

    async def _run(self) -> None:
        while True:
            batch = [await self.queue.get()]
            size = len(batch[0][0])
            while not self.queue.empty() and size < max(1, self.max_batch):
                batch.append(self.queue.get_nowait())
                size += len(batch[-1][0])
            pairs = [p for item, _ in batch for p in item]
            try:
                scores = await asyncio.to_thread(self.model.predict, pairs, batch_size=max(len(pairs), 1))
            except Exception as exc:
                for _, done in batch:
                    done.set_exception(exc)
                continue
            at = 0
            for item, done in batch:
                done.set_result(scores[at : at + len(item)])
                at += len(item)


def build(model_path: str, name: str, max_batch: int) -> FastAPI:
    model = CrossEncoder(model_path, device="cpu")  # one label: sigmoid of the logit, as genmesh and OVMS
    app = FastAPI()
    batcher = Batcher(model, max_batch)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/rerank")
    async def rerank(body: dict[str, Any]) -> dict[str, Any]:
        docs = [d if isinstance(d, str) else d["text"] for d in body["documents"]]
        scores = await batcher.predict([(body["query"], d) for d in docs])
        order = sorted(range(len(docs)), key=lambda i: -float(scores[i]))[: body.get("top_n") or len(docs)]
        results = [{"index": i, "relevance_score": float(scores[i])} for i in order]
        return {"id": "rerank", "model": name, "results": results, "meta": {"scoring": "cross_encoder"}}

    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--model", required=True, help="a sentence-transformers CrossEncoder folder")
    p.add_argument("--name", default="cross-encoder")
    p.add_argument("--port", type=int, default=8101)
    p.add_argument("--max-batch", type=int, default=64, help="pairs per predict")
    args = p.parse_args()
    uvicorn.run(build(args.model, args.name, args.max_batch), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
