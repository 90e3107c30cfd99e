"""What the sentence-transformers reference servers (``st_embeddings_server.py``,
``st_rerank_server.py``) share: the dynamic batching of the queued requests on one worker thread, the
FastAPI app with its ``/health``, and the command line. Lives in ``.venv-st`` with them (``make
st-peer``), never in the genmesh venvs."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import uvicorn
from fastapi import FastAPI

T = TypeVar("T")


class Batcher(Generic[T]):
    """One worker running ``infer`` on the queued requests' items together (at most ``max_batch``
    items a call; 0: each request alone) and handing each request its slice of the result."""

    def __init__(self, infer: Callable[[list[T]], Any], max_batch: int) -> None:
        self.infer, self.max_batch = infer, max_batch
        self.queue: asyncio.Queue[tuple[list[T], asyncio.Future[Any]]] = asyncio.Queue()
        self.worker: asyncio.Task[None] | None = None

    async def __call__(self, items: list[T]) -> Any:
        if self.worker is None:
            self.worker = asyncio.create_task(self._run())
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self.queue.put((items, done))
        return await done

    async def _run(self) -> None:
        while True:
            batch = [await self.queue.get()]
            size = len(batch[0][0])
            while not self.queue.empty() and size < max(1, self.max_batch):
                batch.append(self.queue.get_nowait())
                size += len(batch[-1][0])
            items = [x for item, _ in batch for x in item]
            try:
                results = await asyncio.to_thread(self.infer, items)
            except Exception as exc:  # each waiting request gets the failure
                for _, done in batch:
                    done.set_exception(exc)
                continue
            at = 0
            for item, done in batch:
                done.set_result(results[at : at + len(item)])
                at += len(item)


def app() -> FastAPI:
    """A FastAPI app with its ``/health``: the server adds its one endpoint."""
    served = FastAPI()

    @served.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return served


def main(
    doc: str | None,
    build: Callable[[str, str, int], FastAPI],
    *,
    model: str | None,
    model_help: str | None,
    name: str,
    port: int,
    batch_help: str,
) -> None:
    """Parse ``--model`` (``model``: its default; None: required), ``--name``, ``--port`` and
    ``--max-batch``, then serve ``build(model, name, max_batch)`` on 127.0.0.1."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    p.add_argument("--model", default=model, required=model is None, help=model_help)
    p.add_argument("--name", default=name)
    p.add_argument("--port", type=int, default=port)
    p.add_argument("--max-batch", type=int, default=64, help=batch_help)
    args = p.parse_args()
    uvicorn.run(build(args.model, args.name, args.max_batch), host="127.0.0.1", port=args.port, log_level="warning")
