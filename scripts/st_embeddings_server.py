#!/usr/bin/env python3
"""The embeddings peer of ``genmesh-bench embeddings``: sentence-transformers on PyTorch CPU behind
a minimal OpenAI ``/v1/embeddings`` (what a user would otherwise run). Lives in ``.venv-st``
(``make st-peer``), never in the genmesh venvs.

    .venv-st/bin/python scripts/st_embeddings_server.py --model models/all-MiniLM-L6-v2 --port 8100

Each request is encoded as it comes (``SentenceTransformer.encode`` batches the inputs of one
request); requests run one at a time on a worker thread, as a simple FastAPI service would."""

from __future__ import annotations

import argparse
import asyncio
import base64
from typing import Any

import uvicorn
from fastapi import FastAPI
from sentence_transformers import SentenceTransformer


def build(model_path: str, name: str) -> FastAPI:
    model = SentenceTransformer(model_path, device="cpu")
    app = FastAPI()
    lock = asyncio.Lock()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/embeddings")
    async def embeddings(body: dict[str, Any]) -> dict[str, Any]:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        async with lock:
            vectors = await asyncio.to_thread(model.encode, texts, normalize_embeddings=True)
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
    args = p.parse_args()
    uvicorn.run(build(args.model, args.name), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
