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

import base64
from typing import Any

from fastapi import FastAPI
from sentence_transformers import SentenceTransformer

import st_server


def build(model_path: str, name: str, max_batch: int) -> FastAPI:
    model = SentenceTransformer(model_path, device="cpu")
    encode = st_server.Batcher[str](lambda texts: model.encode(texts, normalize_embeddings=True), max_batch)
    app = st_server.app()

    @app.post("/v1/embeddings")
    async def embeddings(body: dict[str, Any]) -> dict[str, Any]:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = await encode(texts)
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


if __name__ == "__main__":
    st_server.main(
        __doc__,
        build,
        model="models/all-MiniLM-L6-v2",
        model_help=None,
        name="all-MiniLM-L6-v2",
        port=8100,
        batch_help="inputs per encode (0: each request alone)",
    )
