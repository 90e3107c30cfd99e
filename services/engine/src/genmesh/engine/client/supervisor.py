"""One model's engine core, kept serving: replaced when it dies or hangs, with back-off and a cap.

The supervisor stands between the generation code and the ``CoreClient`` of the moment. When
the core dies (the ``CoreClient`` has already ended every request in flight with an error) or
the watchdog finds it hung (it is killed, with the same effect), new requests get a 503
``engine_restarting`` with ``Retry-After`` while a new core starts after a back-off (1 s, 2 s,
4 s, ... up to ``core_restart_backoff_max_s``; back to 1 s once a core has served
``core_restart_stable_s``) and loads the model. The tokenizer stays loaded.
More than ``core_restart_limit`` restarts within ``core_restart_window_s`` means a fault that a
new core does not cure: the supervisor gives up and asks the server to exit with
``EXIT_CRASH_LOOP``, so that whatever runs the server (the native launcher, compose,
Kubernetes) starts a fresh process.

It is also where requests meet the core of the moment (vLLM v1's ``AsyncLLM``): ``add`` gives a
request an id, registers it with the output processor and sends it; each step's outputs from the
core go through the processor to the requests, and what a stop string ended is aborted in the
core. A core's death ends every request in flight with a typed error.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import time
from collections.abc import Callable

from ..core import ipc as m
from ..metrics import EngineMetrics
from ..settings import EngineSettings
from .collector import Collector
from .core_client import CoreClient, EngineDeadError
from .core_exit import EXIT_LOAD_CRASH
from .detokenizer import StepDecoder
from .output_processor import OutputProcessor, RequestHandle, TextOptions
from .watchdog import ProgressWatch, Sample

log = logging.getLogger("genmesh.engine.client.supervisor")

EXIT_CRASH_LOOP = 75  # EX_TEMPFAIL: a temporary failure; run me again
CoreFactory = Callable[[], CoreClient]


class EngineRestarting(EngineDeadError):
    """The core is being replaced; try again after ``retry_after_s``."""

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class RestartPolicy:
    """Exponential back-off between restarts, and at most ``limit`` restarts per sliding window.

    The back-off counts the restarts in a row: it starts from ``backoff_s`` again once a core has
    served ``stable_s`` before it died (as the launcher does for its children), or once the window
    holds no restart. The cap counts every restart in the window, however long each core served."""

    def __init__(self, backoff_s: float, backoff_max_s: float, limit: int, window_s: float, stable_s: float) -> None:
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.limit = limit
        self.window_s = window_s
        self.stable_s = stable_s
        self._restarts: list[float] = []
        self._in_a_row = 0

    def next_delay(self, now: float, served_s: float = 0.0) -> float | None:
        """Seconds to wait before the next restart, or None: past the cap, give up. ``served_s``: how
        long the core that died had served (0 for one that failed to start)."""
        self._restarts = [t for t in self._restarts if now - t < self.window_s]
        if len(self._restarts) >= self.limit:
            return None
        if not self._restarts or served_s >= self.stable_s:
            self._in_a_row = 0
        self._restarts.append(now)
        self._in_a_row += 1
        return min(self.backoff_max_s, self.backoff_s * 2.0 ** (self._in_a_row - 1))


class CoreSupervisor:
    def __init__(
        self,
        model: str,
        make_core: CoreFactory,
        settings: EngineSettings,
        metrics: EngineMetrics,
        on_fatal: Callable[[int], None] | None = None,
    ) -> None:
        self.model = model
        self._make_core = make_core
        # Request and scoring-session ids, never reused by a later core: an abort meant for a request
        # of a dead core can never hit a request of its replacement.
        self._ids = itertools.count(1)
        self.settings = settings
        self.metrics = metrics
        self._on_fatal = on_fatal
        self.policy = RestartPolicy(
            settings.core_restart_backoff_s,
            settings.core_restart_backoff_max_s,
            settings.core_restart_limit,
            settings.core_restart_window_s,
            settings.core_restart_stable_s,
        )
        self.core: CoreClient | None = None
        self._exited: asyncio.Future[str] | None = None
        self.outputs: OutputProcessor | None = None  # once the tokenizer is loaded
        self._task: asyncio.Task[None] | None = None
        self.restarting = False
        self.failed: str | None = None  # set when the supervisor gave up
        self.last_failure: str | None = None
        self._cause = "exited"
        self._restart_at = 0.0
        self._down_at = 0.0
        self._up_since: float | None = None
        self.load_s = 0.0  # how long the last core took to load: the Retry-After estimate
        self.sleep = asyncio.sleep  # the back-off's wait (a test's own, to run without waiting)
        metrics.core_uptime.set_function(self.uptime_s)

    # -- what the generation code uses ---------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return not self.restarting and self.failed is None and self.core is not None and self.core.alive

    @property
    def stats(self) -> m.Stats:
        return self.core.stats if self.core is not None else m.Stats(0, 0, 0.0)

    def unavailable_reason(self) -> str:
        if self.failed is not None:
            return self.failed
        if self.restarting:
            return f"engine core restarting after: {self.last_failure}"
        if self.core is None:
            return "engine is loading the model"
        return self.core.unavailable_reason()

    def retry_after_s(self) -> int:
        """When a new core should be serving (whole seconds, at least 1)."""
        if not self.restarting:
            return 1
        return max(1, math.ceil(self._restart_at - time.monotonic() + self.load_s))

    def uptime_s(self) -> float:
        return time.monotonic() - self._up_since if self._up_since is not None and self.alive else 0.0

    def _serving(self) -> tuple[CoreClient, OutputProcessor]:
        """The core to send to and the processor of its outputs; ``EngineDeadError`` when there is none."""
        if self.restarting:
            raise EngineRestarting(self.unavailable_reason(), self.retry_after_s())
        if self.core is None or self.failed is not None or not self.core.alive:
            raise EngineDeadError(self.unavailable_reason())
        if self.outputs is None:
            raise EngineDeadError("engine is loading the tokenizer")
        return self.core, self.outputs

    def add(self, prompt_ids: list[int], params: m.SamplingParams, text: TextOptions) -> RequestHandle:
        core, outputs = self._serving()
        rid = next(self._ids)
        handle = outputs.add_request(rid, len(prompt_ids), text)
        try:
            core.send(m.AddRequest(rid, prompt_ids, params))
        except BaseException:
            outputs.abort(rid)
            raise
        return handle

    def abort(self, request_id: int) -> None:
        """No-op for a request that has ended; else the core stops it."""
        if self.outputs is not None and self.outputs.abort(request_id):
            self._send_if_alive(m.Abort([request_id]))

    def _send_if_alive(self, msg: m.ToCore) -> None:
        if self.core is not None and self.core.alive:
            self.core.send(msg)

    # -- scoring sessions (scoring_client.py) ------------------------------------------------------------

    def score_open(
        self, token_ids: list[int], top: int, report_from: int, keep: bool
    ) -> tuple[int, Collector[m.ScoreOutput]]:
        core, outputs = self._serving()
        sid = next(self._ids)
        session = outputs.open_session(sid)
        core.send(m.ScoreOpen(sid, token_ids, top, report_from, keep))
        return sid, session

    def score_append(self, session_id: int, token_ids: list[int], last: bool) -> None:
        if self.outputs is not None and session_id in self.outputs.sessions:
            self._send_if_alive(m.ScoreAppend(session_id, token_ids, last))

    def score_close(self, session_id: int) -> None:
        if self.outputs is not None and self.outputs.close_session(session_id):
            self._send_if_alive(m.ScoreClose([session_id]))

    def _on_step(self, core: CoreClient, step: m.StepOutputs) -> None:
        if self.outputs is None:
            return
        stopped = self.outputs.process(step.outputs)
        if stopped and core.alive:
            core.send(m.Abort(stopped))
        self.outputs.process_scored(step.scored)

    # -- life cycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the first core and wait for its model to load (the caller loads the tokenizer meanwhile)."""
        self.core = await self._spawn()

    def attach_decoder(self, make: Callable[[], StepDecoder]) -> None:
        """The tokenizer is loaded: requests are accepted from now on, and supervising starts."""
        assert self.core is not None, "start() first"
        self.outputs = OutputProcessor(make())
        self._task = asyncio.create_task(self._supervise(), name=f"supervise-{self.model}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.core is not None:
            await self.core.close()

    async def _spawn(self) -> CoreClient:
        core = self._make_core()
        exited: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def on_exit(reason: str) -> None:
            self.restarting = self.failed is None  # from now on new requests hear "restarting"
            self.last_failure = reason
            self._restart_at = self._down_at = time.monotonic()
            if self.outputs is not None:
                self.outputs.fail_all(m.RequestError("engine", reason))
            if not exited.done():
                exited.set_result(reason)

        core.on_exit = on_exit
        core.on_step = lambda step: self._on_step(core, step)
        self._exited = exited
        started = time.monotonic()
        try:
            await core.start(self.settings.startup_timeout_s)
        except BaseException:
            await core.close()
            raise
        self.load_s = time.monotonic() - started
        self._up_since = time.monotonic()
        return core

    async def _supervise(self) -> None:
        while True:
            reason = await self._watch()
            assert self.core is not None
            await self.core.close()  # its sockets and folder; the process is gone
            if not await self._replace(reason):
                return

    async def _watch(self) -> str:
        """Wait for the current core to die; kill it if the watchdog finds it hung. Returns why it died."""
        core, exited = self.core, self._exited
        assert core is not None
        assert exited is not None
        timeout_s = self.settings.watchdog_timeout_s
        watch = ProgressWatch(timeout_s)
        every = min(1.0, timeout_s / 4) if timeout_s > 0 else 1.0
        self._cause = "exited"
        while True:
            done, _ = await asyncio.wait({exited}, timeout=every)
            if done:
                return exited.result()
            stats = core.stats
            in_flight = len(self.outputs) if self.outputs is not None else 0
            sample = Sample(stats.steps, stats.tokens, in_flight, core.stalled_for(), core.has_unread_output())
            hung = watch.check(time.monotonic(), sample)
            if hung is not None and core.dead_reason is None:
                self._cause = "hung"
                self.restarting = True
                self._restart_at = self._down_at = time.monotonic()
                core.kill(f"engine core hung: {hung}; killed")

    async def _replace(self, reason: str) -> bool:
        """Start a new core, after the back-off; retry while the cap allows. False: gave up."""
        cause = self._cause
        served_s = self._down_at - self._up_since if self._up_since is not None else 0.0
        while True:
            delay = self.policy.next_delay(time.monotonic(), served_s)
            served_s = 0.0  # a core that failed to start served nothing
            if delay is None:
                self._give_up(reason)
                return False
            self.restarting = True
            self._restart_at = time.monotonic() + delay
            log.warning("model %s: %s; a new engine core starts in %.1f s", self.model, reason, delay)
            await self.sleep(delay)
            self.metrics.core_restarted(cause)
            try:
                core = await self._spawn()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, EngineDeadError) and exc.certain_to_repeat:
                    self._give_up(f"a new engine core failed to start: {exc}", repeats=True)
                    return False
                reason = f"a new engine core failed to start: {exc or type(exc).__name__}"
                cause = "start_failed"
                self.last_failure = reason
                log.error("model %s: %s", self.model, reason)
                continue
            self.core = core
            self.restarting = False
            log.warning(
                "model %s: engine core replaced (pid %s), serving again %.1f s after it went down",
                self.model,
                core.core_pid,
                time.monotonic() - self._down_at,
            )
            return True

    def _give_up(self, reason: str, repeats: bool = False) -> None:
        """``repeats``: the last core died in a way every new one would (core_exit.py), so no more are started."""
        p = self.policy
        self.restarting = False
        status = EXIT_LOAD_CRASH if repeats else EXIT_CRASH_LOOP
        if repeats:
            self.failed = f"{reason}; a new core would die the same way: the server exits (status {status})"
        else:
            self.failed = (
                f"engine core failed again after {p.limit} restart(s) within {p.window_s:g} s (last: {reason}); "
                f"the server exits (status {status}) so that it is started afresh"
            )
        log.critical("model %s: %s", self.model, self.failed)
        if self._on_fatal is not None:
            self._on_fatal(status)
