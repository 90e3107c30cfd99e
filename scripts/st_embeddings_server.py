#!/usr/bin/env python3
"""The embeddings peer of ``genmesh-bench embeddings``: sentence-transformers on PyTorch CPU behind
a minimal OpenAI ``/v1/embeddings`` (what a user would otherwise run). Lives in ``.venv-st``
(``make st-peer``), never in the genmesh venvs.

    .venv-st/bin/python scripts/st_embeddings_server.py --model models/all-MiniLM-L6-v2 --port 8100

Requests are batched dynamically, as text-embeddings-inference does: while one ``encode`` runs on
the worker thread, the requests that arrive queue up, and the next ``encode`` takes all of them
(up to ``--max-batch`` inputs) at once. ``--max-batch 0`` encodes each request alone, one at a
time, as the simplest FastAPI service would."""

from __future__ import annotations

import argparse
import asyncio
import base64
from typing import Any

import uvicorn
from fastapi import FastAPI
from sentence_transformers import SentenceTransformer


class Batcher:
    """One worker encoding the queued requests' inputs together (at most ``max_batch`` per encode)."""

    def __init__(self, model: SentenceTransformer, max_batch: int) -> None:
        self.model, self.max_batch = model, max_batch
        self.queue: asyncio.Queue[tuple[list[str], asyncio.Future[Any]]] = asyncio.Queue()
        self.worker: asyncio.Task[None] | None = None

    async def encode(self, texts: list[str]) -> Any:
        if self.worker is None:
            self.worker = asyncio.create_task(self._run())
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self.queue.put((texts, done))
        return await done

    async def _run(self) -> None:
        while True:
            batch = [await self.queue.get()]
            size = len(batch[0][0])
            while not self.queue.empty() and size < max(1, self.max_batch):
                batch.append(self.queue.get_nowait())
                size += len(batch[-1][0])
            texts = [t for item, _ in batch for t in item]
            try:
                vectors = await asyncio.to_thread(self.model.encode, texts, normalize_embeddings=True)
            except Exception as exc:  # each waiting request gets the failure
                for _, done in batch:
                    done.set_exception(exc)
                continue
            at = 0
            for item, done in batch:
                done.set_result(vectors[at : at + len(item)])
                at += len(item)


def build(model_path: str, name: str, max_batch: int) -> FastAPI:
    model = SentenceTransformer(model_path, device="cpu")
    app = FastAPI()
    batcher = Batcher(model, max_batch)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/embeddings")
    async def embeddings(body: dict[str, Any]) -> dict[str, Any]:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = await batcher.encode(texts)
        b64 = body.get("encoding_format") == "base64"
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if b64 else v.tolist(),
            }
            for i, v in enumerate(vectors)
        ]
        return {"object": "list", "data": data, "model": name, "usage": {"prompt_tokens": 0, "total_tokens": 0}}

    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--model", default="models/all-MiniLM-L6-v2")
    p.add_argument("--name", default="all-MiniLM-L6-v2")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--max-batch", type=int, default=64, help="inputs per encode (0: each request alone)")
    args = p.parse_args()
    uvicorn.run(build(args.model, args.name, args.max_batch), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
