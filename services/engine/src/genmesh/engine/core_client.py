"""The API process's side of the engine core: spawn it, feed it, route its outputs, watch it die.

The client binds two ZeroMQ sockets in a private temporary folder, spawns the core process,
and runs one asyncio task that reads a ``StepOutputs`` message per engine step, detokenises
the step's new tokens for all requests in one batched call, and hands each request its text.
The core's death is noticed at once through the process sentinel (an fd the event loop
watches): every request in flight ends with an error and ``alive`` turns false.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import multiprocessing
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import zmq
import zmq.asyncio

from . import messages as m
from .core import CoreConfig, run_core
from .detokenizer import StepDecoder

log = logging.getLogger("genmesh.engine.core_client")

EXIT_GRACE_S = 0.05  # a dead core's last messages are read first: wait this long, while any are queued
EXIT_DEFERRALS = 40


def has_pending(sock: zmq.asyncio.Socket) -> bool:
    """Messages wait on ``sock`` to be read.

    ``get``, never ``getsockopt``: reading ZMQ_EVENTS clears the socket's edge-triggered fd, and
    only the asyncio socket's own ``get`` then re-schedules its waiting ``recv``; ``getsockopt``
    is the plain socket's, and a reader can sleep for ever with messages waiting (measured: a
    reader got 0 of 2,000 messages while another task polled with ``getsockopt``).
    """
    return bool(int(sock.get(zmq.EVENTS)) & zmq.POLLIN)


class EngineDeadError(RuntimeError):
    pass


@dataclass(frozen=True)
class TextOutput:
    """What a request's consumer receives per engine step: new text, not token ids."""

    text: str
    num_tokens: int
    finish_reason: str | None = None
    error: str | None = None
    # Only when the request asked for logprobs: this step's token ids and their log-probabilities.
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    # Beam search: the finished sequences (token ids, not text), best first.
    sequences: list[m.Sequence] | None = None


@dataclass
class RequestStream:
    request_id: int
    detok: Any
    queue: asyncio.Queue[TextOutput] = field(default_factory=asyncio.Queue)


class CoreClient:
    def __init__(
        self,
        config: CoreConfig,
        log_level: str = "info",
        on_stats: Callable[[m.Stats], None] | None = None,
        stats_log_interval_s: float = 10.0,
        stall_timeout_s: float = 60.0,
        decoder: StepDecoder | None = None,
        ids: Iterator[int] | None = None,
    ) -> None:
        self._detok = decoder
        self.stall_timeout_s = stall_timeout_s
        self._last_heard = time.monotonic()
        self.config = config
        self.log_level = log_level
        self.on_stats = on_stats
        self.stats_log_interval_s = stats_log_interval_s
        self.streams: dict[int, RequestStream] = {}
        self.scoring: dict[int, asyncio.Queue[m.ScoreOutput]] = {}  # scoring sessions (scorer.py)
        self.stats = m.Stats(0, 0, 0.0)
        self.ready = False
        self.dead_reason: str | None = None
        self.core_pid: int | None = None
        # Request ids; a supervisor passes one counter to every core it starts, so that an abort
        # meant for a request of a dead core can never hit a request of its replacement.
        self._ids = ids if ids is not None else itertools.count(1)
        self.on_exit: Callable[[str], None] | None = None  # told once, with the reason, when the core dies
        self._ctx = zmq.asyncio.Context()
        self._dir = tempfile.mkdtemp(prefix="genmesh-engine-")
        self._inbox = self._ctx.socket(zmq.PUSH)  # to the core
        self._outbox = self._ctx.socket(zmq.PULL)  # from the core
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._reader: asyncio.Task[None] | None = None
        self._loaded: asyncio.Future[None] | None = None
        self._last_stats_log = 0.0
        self._exit_deferrals = 0
        self._closed = False

    def attach_decoder(self, decoder: StepDecoder) -> None:
        """The tokenizer loads alongside the core; requests are only accepted once both are ready."""
        self._detok = decoder

    @property
    def alive(self) -> bool:
        """Loaded, not dead, and heard from recently (a step or an idle heartbeat)."""
        return self.ready and self.dead_reason is None and self.stalled_for() < self.stall_timeout_s

    def stalled_for(self) -> float:
        return time.monotonic() - self._last_heard

    def unavailable_reason(self) -> str:
        if self.dead_reason is not None:
            return self.dead_reason
        if not self.ready:
            return "engine is loading the model"
        return f"engine loop silent for {self.stalled_for():.0f} s (stalled)"

    async def start(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        in_addr = f"ipc://{self._dir}/in"
        out_addr = f"ipc://{self._dir}/out"
        self._inbox.bind(in_addr)
        self._outbox.bind(out_addr)
        self._loaded = loop.create_future()
        self._reader = asyncio.create_task(self._read_outputs(), name="engine-core-reader")
        proc = multiprocessing.get_context("spawn").Process(
            target=run_core,
            args=(self.config, in_addr, out_addr, self.log_level),
            name="genmesh-engine-core",
            daemon=True,
        )
        proc.start()
        self._proc = proc
        loop.add_reader(proc.sentinel, self._on_core_exit)
        await asyncio.wait_for(asyncio.shield(self._loaded), timeout_s)

    def _on_core_exit(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._proc is not None
        loop.remove_reader(self._proc.sentinel)
        # Read what the core sent before it died (a LoadFailed with its reason) before declaring it dead.
        loop.call_later(EXIT_GRACE_S, self._core_exited)

    def _core_exited(self) -> None:
        assert self._proc is not None
        if self._closed:
            return
        if self.has_unread_output() and self._exit_deferrals < EXIT_DEFERRALS:
            self._exit_deferrals += 1
            asyncio.get_running_loop().call_later(EXIT_GRACE_S, self._core_exited)
            return
        self._proc.join(0)
        code = self._proc.exitcode
        reason = f"engine core process exited (exit code {code})"
        if self.dead_reason is None:
            self.dead_reason = reason
            log.error(reason)
        if self._loaded is not None and not self._loaded.done():
            self._loaded.set_exception(EngineDeadError(reason))
        why = self.dead_reason
        for stream in list(self.streams.values()):
            stream.queue.put_nowait(TextOutput("", 0, "error", why))
        self.streams.clear()
        for sid, queue in list(self.scoring.items()):
            queue.put_nowait(m.ScoreOutput(sid, [], True, why))
        self.scoring.clear()
        self._set_stats(m.Stats(0, 0, 0.0, self.stats.steps, self.stats.tokens))
        if self.on_exit is not None:
            self.on_exit(why)

    def _set_stats(self, stats: m.Stats) -> None:
        self.stats = stats
        if self.on_stats is not None:
            self.on_stats(stats)

    async def _read_outputs(self) -> None:
        while True:
            data = await self._outbox.recv()
            self._last_heard = time.monotonic()
            try:
                self._dispatch(m.decode_from_core(data))
            except Exception:  # one bad message must not stop the reader
                log.exception("bad message from the engine core")

    def _dispatch(self, msg: m.FromCore) -> None:
        if isinstance(msg, m.StepOutputs):
            self._deliver(msg.outputs)
            for scored in msg.scored:
                queue = self.scoring.get(scored.session_id)
                if queue is not None:
                    queue.put_nowait(scored)
            self._set_stats(msg.stats)
            self._maybe_log_stats()
        elif isinstance(msg, m.Ready):
            self.core_pid = msg.pid
            self.ready = True
            if self._loaded is not None and not self._loaded.done():
                self._loaded.set_result(None)
        elif isinstance(msg, m.LoadFailed):
            self.dead_reason = f"model failed to load: {msg.error}"
            if self._loaded is not None and not self._loaded.done():
                self._loaded.set_exception(EngineDeadError(self.dead_reason))

    def _deliver(self, outputs: list[m.RequestOutput]) -> None:
        assert self._detok is not None, "decoder not attached"
        work: list[tuple[Any, list[int], bool]] = []
        targets: list[tuple[RequestStream, m.RequestOutput]] = []
        for out in outputs:
            stream = self.streams.get(out.request_id)
            if stream is None:
                continue  # aborted meanwhile
            if out.finish_reason is not None:
                del self.streams[out.request_id]
            if out.finish_reason in ("error", "rejected"):
                stream.queue.put_nowait(TextOutput("", len(out.token_ids), out.finish_reason, out.error))
                continue
            if out.sequences is not None:
                stream.queue.put_nowait(TextOutput("", 0, out.finish_reason, sequences=out.sequences))
                continue
            work.append((stream.detok, out.token_ids, out.finish_reason is not None))
            targets.append((stream, out))
        for (stream, out), delta in zip(targets, self._detok.step(work), strict=True):
            if out.logprobs is None:
                stream.queue.put_nowait(TextOutput(delta, len(out.token_ids), out.finish_reason))
            else:
                stream.queue.put_nowait(
                    TextOutput(delta, len(out.token_ids), out.finish_reason, None, out.token_ids, out.logprobs)
                )

    def _maybe_log_stats(self) -> None:
        if self.stats_log_interval_s <= 0:
            return
        now = time.monotonic()
        if now - self._last_stats_log >= self.stats_log_interval_s:
            self._last_stats_log = now
            s = self.stats
            log.info(
                "All requests: %d; Scheduled requests: %d; Cache usage %.1f%%",
                s.running + s.waiting,
                s.running,
                s.cache_usage * 100,
            )

    def add(self, prompt_ids: list[int], params: m.SamplingParams, skip_special_tokens: bool = True) -> RequestStream:
        if not self.alive or self._detok is None:
            raise EngineDeadError(self.unavailable_reason())
        rid = next(self._ids)
        stream = RequestStream(rid, self._detok.new_request(skip_special_tokens))
        self.streams[rid] = stream
        self._inbox.send(m.encode(m.AddRequest(rid, prompt_ids, params)))
        return stream

    def abort(self, request_id: int) -> None:
        if self.streams.pop(request_id, None) is not None and self.alive:
            self._inbox.send(m.encode(m.Abort([request_id])))

    def score_open(
        self, token_ids: list[int], top: int, report_from: int, keep: bool
    ) -> tuple[int, asyncio.Queue[m.ScoreOutput]]:
        """A scoring session on the core (scorer.py); its outputs arrive on the queue."""
        if not self.alive:
            raise EngineDeadError(self.unavailable_reason())
        sid = next(self._ids)
        queue: asyncio.Queue[m.ScoreOutput] = asyncio.Queue()
        self.scoring[sid] = queue
        self._inbox.send(m.encode(m.ScoreOpen(sid, token_ids, top, report_from, keep)))
        return sid, queue

    def score_append(self, session_id: int, token_ids: list[int], last: bool) -> None:
        if session_id in self.scoring and self.alive:
            self._inbox.send(m.encode(m.ScoreAppend(session_id, token_ids, last)))

    def score_close(self, session_id: int) -> None:
        if self.scoring.pop(session_id, None) is not None and self.alive:
            self._inbox.send(m.encode(m.ScoreClose([session_id])))

    def kill(self, reason: str) -> None:
        """SIGKILL the core (it works on a stopped process too); its death is then handled as any other."""
        if self.dead_reason is None:
            self.dead_reason = reason
            log.error(reason)
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()

    def _pending_output(self) -> bool:
        return has_pending(self._outbox)

    def has_unread_output(self) -> bool:
        """Messages from the core wait to be read (a busy API process, not a silent core)."""
        return self._pending_output()

    async def close(self, timeout_s: float = 10.0) -> None:
        self._closed = True
        proc = self._proc
        if proc is not None and proc.is_alive():
            with contextlib.suppress(zmq.ZMQError):
                await self._inbox.send(m.encode(m.Shutdown()))
            await asyncio.to_thread(proc.join, timeout_s)
            if proc.is_alive():
                proc.kill()
                await asyncio.to_thread(proc.join, timeout_s)
        if proc is not None:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(proc.sentinel)
        if self._reader is not None:
            self._reader.cancel()
        self._inbox.close(linger=0)
        self._outbox.close(linger=0)
        self._ctx.term()
        shutil.rmtree(self._dir, ignore_errors=True)
