"""The API process's side of the engine core: spawn it, send to it, receive from it, watch it die.

The client binds two ZeroMQ sockets in a private temporary folder, spawns the core process,
and runs one asyncio task that reads the core's messages: each engine step's ``StepOutputs``
goes to ``on_step`` (the supervisor, which hands it to the output processor). The client knows
nothing of requests. The core's death is noticed at once through the process sentinel (an fd
the event loop watches): ``alive`` turns false and ``on_exit`` is told why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import shutil
import tempfile
import time
from collections.abc import Callable

import msgspec
import zmq
import zmq.asyncio

from ..core import ipc as m
from ..core.config import CoreConfig
from ..core.step_loop import run_core
from .core_exit import certain_to_repeat, describe_exit

log = logging.getLogger("genmesh.engine.client.core_client")

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
    def __init__(self, reason: str = "", certain_to_repeat: bool = False) -> None:
        super().__init__(reason)
        self.certain_to_repeat = certain_to_repeat  # a new core would die the same way (core_exit.py)


class CoreClient:
    target: Callable[[CoreConfig, str, str, str], None] = staticmethod(run_core)  # the core process's entry point

    def __init__(
        self,
        config: CoreConfig,
        log_level: str = "info",
        on_stats: Callable[[m.Stats], None] | None = None,
        stats_log_interval_s: float = 10.0,
        stall_timeout_s: float = 60.0,
    ) -> None:
        self.stall_timeout_s = stall_timeout_s
        self._last_heard = time.monotonic()
        self.config = config
        self.log_level = log_level
        self.on_stats = on_stats
        self.stats_log_interval_s = stats_log_interval_s
        self.stats = m.Stats(0, 0, 0.0)
        self.ready = False
        self.dead_reason: str | None = None
        self.core_pid: int | None = None
        self.on_step: Callable[[m.StepOutputs], None] | None = None  # each engine step's outputs
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
            target=self.target,
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
        reason = describe_exit(code, loading=not self.ready)
        if self.dead_reason is None:
            self.dead_reason = reason
            log.error(reason)
        if self._loaded is not None and not self._loaded.done():
            self._loaded.set_exception(EngineDeadError(reason, certain_to_repeat(code, loading=True)))
        why = self.dead_reason
        self._set_stats(msgspec.structs.replace(self.stats, running=0, waiting=0, cache_usage=0.0))
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
            if self.on_step is not None:
                self.on_step(msg)
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

    def send(self, msg: m.ToCore) -> None:
        """One message to the core; refused (``EngineDeadError``) unless the core is alive."""
        if not self.alive:
            raise EngineDeadError(self.unavailable_reason())
        self._inbox.send(m.encode(msg))

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
            # Never wait to hand over the Shutdown: a core that has stopped reading (one that sent
            # LoadFailed and closed its inbox, then takes its time to exit) leaves the PUSH socket
            # without a peer, and a blocking send would wait for ever (zmq.Again is a ZMQError).
            with contextlib.suppress(zmq.ZMQError):
                await self._inbox.send(m.encode(m.Shutdown()), flags=zmq.NOBLOCK)
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
