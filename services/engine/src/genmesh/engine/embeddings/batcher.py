"""Dynamic batching: the inputs of concurrent requests run as one batch, up to ``max_batch_size``
inputs (and ``max_batch_tokens`` padded tokens), waiting at most ``max_wait_s`` for the batch to
fill. Inputs of similar length go together (the queue is served longest-waiting first, the batch
filled with the pending inputs closest in length). One batch runs at a time on a worker thread
(OpenVINO's infer releases the GIL; one batch uses every core). The queue is bounded: past
``max_queued`` inputs a request is refused with 503 and Retry-After (one that could never fit is the
client's error: ``check_fits``). A failed batch fails only its
own requests; a request whose client left is dropped before it runs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from genmesh.protocol import invalid_request, service_unavailable

log = logging.getLogger("genmesh.engine.embeddings.batcher")

T = TypeVar("T")
# One batch of inputs (token ids; a cross-encoder's pairs) -> one row per input
Runner = Callable[[list[Any]], np.ndarray]


@dataclass
class _Item(Generic[T]):
    ids: T
    size: int
    future: asyncio.Future[np.ndarray]
    since: float = field(default_factory=time.monotonic)


class Batcher(Generic[T]):
    """``size(input)``: its length in tokens (token ids: ``len``)."""

    def __init__(
        self,
        run: Runner,
        max_batch_size: int,
        max_batch_tokens: int,
        max_wait_s: float,
        max_queued: int,
        size: Callable[[T], int] = len,  # type: ignore[assignment]
    ) -> None:
        self._run = run
        self._size = size
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_wait_s = max_wait_s
        self.max_queued = max_queued
        self._pending: list[_Item[T]] = []
        self._wake = asyncio.Event()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="embeddings")
        self._task: asyncio.Task[None] | None = None
        self._on_batch: Callable[[int], None] = lambda size: None

    def start(self, on_batch: Callable[[int], None] = lambda size: None) -> None:
        """``on_batch(size)`` after each batch that ran (metrics)."""
        self._on_batch = on_batch
        self._task = asyncio.create_task(self._loop(), name="embeddings-batcher")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for item in self._pending:
            item.future.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def check_fits(self, count: int, param: str) -> None:
        """A 400 naming ``param`` when ``count`` inputs are more than the queue can ever hold: such a
        request is the client's error (a queue that is merely busy answers 503 in ``embed``)."""
        if count > self.max_queued:
            raise invalid_request(
                f"the request makes {count} inputs of {param}, more than the batch queue holds ({self.max_queued}, "
                "--embedding-max-queued-inputs); send fewer",
                param=param,
            )

    async def embed(self, inputs: list[T]) -> np.ndarray:
        """One vector per input, in order."""
        if len(self._pending) + len(inputs) > self.max_queued:
            raise service_unavailable(
                f"the embeddings queue is full ({self.max_queued} inputs); retry shortly", "queue_full", 1
            )
        loop = asyncio.get_running_loop()
        items = [_Item(ids, self._size(ids), loop.create_future()) for ids in inputs]
        self._pending.extend(items)
        self._wake.set()
        try:
            vectors = await asyncio.gather(*(item.future for item in items))
        except BaseException:
            for item in items:
                item.future.cancel()
            raise
        return np.stack(vectors)

    def _take(self) -> list[_Item[T]]:
        """The oldest pending input and the others closest to it in length, within the limits."""
        self._pending = [item for item in self._pending if not item.future.done()]
        if not self._pending:
            return []
        first = self._pending[0]
        rest = sorted(self._pending[1:], key=lambda item: abs(item.size - first.size))
        batch, longest = [first], first.size
        for item in rest:
            if len(batch) >= self.max_batch_size:
                break
            if max(longest, item.size) * (len(batch) + 1) > self.max_batch_tokens:
                continue
            batch.append(item)
            longest = max(longest, item.size)
        chosen = {id(item) for item in batch}
        self._pending = [item for item in self._pending if id(item) not in chosen]
        return batch

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            # wait for the batch to fill, at most max_wait_s after its oldest input arrived
            deadline = self._pending[0].since + self.max_wait_s if self._pending else time.monotonic()
            while len(self._pending) < self.max_batch_size and (left := deadline - time.monotonic()) > 0:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), left)
                except TimeoutError:
                    break
            batch = self._take()
            if not batch:
                continue
            try:
                vectors = await loop.run_in_executor(self._pool, self._run, [item.ids for item in batch])
            except Exception as exc:  # fails this batch's requests only
                log.exception("embeddings batch of %d failed", len(batch))
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(exc)
                continue
            self._on_batch(len(batch))
            for item, vector in zip(batch, vectors, strict=True):
                if not item.future.done():
                    item.future.set_result(vector)
