#!/usr/bin/env python3
"""The rerank peer of ``genmesh-bench rerank``: sentence-transformers' ``CrossEncoder`` on PyTorch
CPU behind a minimal ``/v1/rerank`` (Cohere's body and reply). Lives in ``.venv-st`` (``make
st-peer``), never in the genmesh venvs.

    .venv-st/bin/python scripts/st_rerank_server.py --model /tmp/cross-encoder --port 8101

Pairs are batched dynamically: while one ``predict`` runs on the worker thread, the requests that
arrive queue up, and the next ``predict`` takes all their pairs (up to ``--max-batch``) at once."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from sentence_transformers import CrossEncoder

import st_server


def build(model_path: str, name: str, max_batch: int) -> FastAPI:
    model = CrossEncoder(model_path, device="cpu")  # one label: sigmoid of the logit, as genmesh and OVMS
    predict = st_server.Batcher[tuple[str, str]](
        lambda pairs: model.predict(pairs, batch_size=max(len(pairs), 1)), max_batch
    )
    app = st_server.app()

    @app.post("/v1/rerank")
    async def rerank(body: dict[str, Any]) -> dict[str, Any]:
        docs = [d if isinstance(d, str) else d["text"] for d in body["documents"]]
        scores = await predict([(body["query"], d) for d in docs])
        order = sorted(range(len(docs)), key=lambda i: -float(scores[i]))[: body.get("top_n") or len(docs)]
        results = [{"index": i, "relevance_score": float(scores[i])} for i in order]
        return {"id": "rerank", "model": name, "results": results, "meta": {"scoring": "cross_encoder"}}

    return app


if __name__ == "__main__":
    st_server.main(
        __doc__,
        build,
        model=None,
        model_help="a sentence-transformers CrossEncoder folder",
        name="cross-encoder",
        port=8101,
        batch_help="pairs per predict",
    )
