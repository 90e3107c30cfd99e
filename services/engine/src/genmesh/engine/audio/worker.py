"""One audio model's worker: its inferences run one at a time on a thread of their own (OpenVINO
releases the GIL; one inference uses every core it is given), behind a bounded queue. Past
``max_queued`` waiting jobs a request gets 503 with Retry-After; a job not done within ``timeout_s``
(waiting included) answers 503 too, and is asked to stop (a job that has not started is dropped; a
running one stops at its next check: Whisper between tokens, the voice between sentences). A client
that leaves stops its job the same way."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from genmesh.protocol import OpenAIError, service_unavailable

T = TypeVar("T")
Job = Callable[[threading.Event], T]
RETRY_AFTER_S = 1


class Stopped(Exception):
    """A job saw its stop flag before it began."""


class AudioWorker:
    def __init__(self, name: str, max_queued: int, timeout_s: float) -> None:
        self.name = name
        self.max_queued = max_queued
        self.timeout_s = timeout_s
        self.pending = 0  # jobs submitted and not finished (queued or running)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"audio-{name}")

    async def run(self, job: Job[T]) -> T:
        """``job(stop)`` on the worker thread; ``stop`` is set when its answer is no longer wanted."""
        if self.pending >= self.max_queued:
            raise service_unavailable(
                f"the {self.name} queue is full ({self.max_queued} requests); retry shortly",
                "queue_full",
                RETRY_AFTER_S,
            )
        stop = threading.Event()

        def call() -> T:
            if stop.is_set():
                raise Stopped
            return job(stop)

        self.pending += 1
        future = asyncio.get_running_loop().run_in_executor(self._pool, call)
        future.add_done_callback(self._finished)
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.timeout_s)
        except TimeoutError:
            stop.set()
            raise timed_out(self.name, self.timeout_s) from None
        except BaseException:
            stop.set()
            raise

    def _finished(self, future: asyncio.Future[Any]) -> None:
        self.pending -= 1
        if not future.cancelled():
            future.exception()  # retrieved: a dropped job's error is not "never retrieved"

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def timed_out(name: str, timeout_s: float) -> OpenAIError:
    return service_unavailable(
        f"the {name} request did not finish within {timeout_s:g} s; retry shortly", "timeout", RETRY_AFTER_S
    )
