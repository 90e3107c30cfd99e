"""One audio model's worker: its inferences run one at a time on a thread of their own (OpenVINO
releases the GIL; one inference uses every core it is given), behind a bounded queue.

A request is a ``Session``: past ``max_queued`` open sessions a new one gets 503 with Retry-After. A
session's jobs (a transcription is one; a speech request one per chunk) wait in a lane of its own, and
the thread takes one job from each lane with work in turn (round robin), so a long request's chunks
interleave with a short one's instead of holding it behind them. A job not done within ``timeout_s``
(waiting included) answers 503 too, and its session is stopped: its queued jobs are dropped and its
running one is asked to stop at its next check (Whisper between tokens); a speech chunk, one inference,
runs to its end, so a stopped request frees the worker within one chunk. A client that leaves stops its
session the same way. The session keeps its place in the count until its running job has ended."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from genmesh.protocol import OpenAIError, service_unavailable

T = TypeVar("T")
Job = Callable[[threading.Event], T]
RETRY_AFTER_S = 1


class Stopped(Exception):
    """A job saw its stop flag before it began."""


class Session:
    """One request's jobs, in a lane of their own on the worker; ``stop`` is set once its answers are no
    longer wanted (``close``, a deadline passed, the client gone)."""

    def __init__(self, worker: AudioWorker) -> None:
        self.worker = worker
        self.stop = threading.Event()
        # under worker.lock: the jobs waiting, and whether the session is in the worker's turns or running
        self.queued: deque[tuple[Job[Any], concurrent.futures.Future[Any]]] = deque()
        self.scheduled = False
        self._live = 0  # jobs submitted and not done
        self._closed = False
        self._released = False

    def submit(self, job: Job[T]) -> asyncio.Future[T]:
        """Queue ``job(stop)`` in this session's lane; its future is done when the job is."""
        if self._closed:
            raise Stopped
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        self.worker.enqueue(self, job, done)
        self._live += 1
        future = asyncio.wrap_future(done)
        future.add_done_callback(self._done)
        return future

    async def result(self, future: asyncio.Future[T]) -> T:
        """``future``'s result within the worker's deadline; past it, or if the waiter is cancelled, the
        session stops."""
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.worker.timeout_s)
        except TimeoutError:
            self.close()
            raise timed_out(self.worker.name, self.worker.timeout_s) from None
        except BaseException:
            self.close()
            raise

    async def run(self, job: Job[T]) -> T:
        return await self.result(self.submit(job))

    async def map(self, jobs: Iterable[Job[T]], ahead: int = 1) -> AsyncIterator[T]:
        """Each job's result, in order; ``ahead`` more jobs wait in the lane meanwhile (so the worker need
        not wait for this request's next chunk), never more."""
        window: deque[asyncio.Future[T]] = deque()
        try:
            for job in jobs:
                window.append(self.submit(job))
                if len(window) > ahead:
                    yield await self.result(window.popleft())
            while window:
                yield await self.result(window.popleft())
        finally:
            for future in window:
                future.cancel()

    def close(self) -> None:
        """Stop: queued jobs are dropped, the running one sees ``stop``. The worker counts the session
        until that job has ended."""
        if self._closed:
            return
        self._closed = True
        self.stop.set()
        self.worker.drop(self)
        self._release_if_idle()

    def _done(self, future: asyncio.Future[Any]) -> None:
        self._live -= 1
        if not future.cancelled():
            future.exception()  # retrieved: a dropped job's error is not "never retrieved"
        self._release_if_idle()

    def _release_if_idle(self) -> None:
        if self._closed and self._live == 0 and not self._released:
            self._released = True
            self.worker.pending -= 1


class AudioWorker:
    def __init__(self, name: str, max_queued: int, timeout_s: float) -> None:
        self.name = name
        self.max_queued = max_queued
        self.timeout_s = timeout_s
        self.pending = 0  # sessions open, or whose last job still runs
        self.lock = threading.Lock()
        self._turns: deque[Session] = deque()  # sessions with a queued job, in turn order (under lock)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"audio-{name}")

    def open(self) -> Session:
        """A new request's session (``close`` it), or 503 when ``max_queued`` are open."""
        if self.pending >= self.max_queued:
            raise service_unavailable(
                f"the {self.name} queue is full ({self.max_queued} requests); retry shortly",
                "queue_full",
                RETRY_AFTER_S,
            )
        self.pending += 1
        return Session(self)

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        session = self.open()
        try:
            yield session
        finally:
            session.close()

    async def run(self, job: Job[T]) -> T:
        """``job(stop)`` on the worker thread as a request of its own; ``stop`` is set when its answer is
        no longer wanted."""
        async with self.session() as session:
            return await session.run(job)

    def enqueue(self, session: Session, job: Job[T], done: concurrent.futures.Future[T]) -> None:
        with self.lock:
            session.queued.append((job, done))
            if not session.scheduled:
                session.scheduled = True
                self._turns.append(session)
        self._pool.submit(self._turn)  # one turn per job: each runs the next lane's first job

    def drop(self, session: Session) -> None:
        with self.lock:
            dropped = list(session.queued)
            session.queued.clear()
        for _, done in dropped:
            done.cancel()

    def _turn(self) -> None:
        with self.lock:
            while self._turns and not self._turns[0].queued:
                self._turns.popleft().scheduled = False  # a stopped session's lane, emptied
            if not self._turns:
                return
            session = self._turns.popleft()
            job, done = session.queued.popleft()
        try:
            if done.set_running_or_notify_cancel():
                if session.stop.is_set():
                    done.set_exception(Stopped())
                else:
                    try:
                        done.set_result(job(session.stop))
                    except BaseException as exc:
                        done.set_exception(exc)
        finally:
            with self.lock:  # its next turn comes after every lane that waited meanwhile
                if session.queued:
                    self._turns.append(session)
                else:
                    session.scheduled = False

    def close(self) -> None:
        with self.lock:
            sessions = list(self._turns)
        for session in sessions:
            self.drop(session)
        self._pool.shutdown(wait=False, cancel_futures=True)


def timed_out(name: str, timeout_s: float) -> OpenAIError:
    return service_unavailable(
        f"the {name} request did not finish within {timeout_s:g} s; retry shortly", "timeout", RETRY_AFTER_S
    )
