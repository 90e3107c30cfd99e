"""One model's engine core, kept serving: replaced when it dies or hangs, with back-off and a cap.

The supervisor stands between the generation code and the ``CoreClient`` of the moment. When
the core dies (the ``CoreClient`` has already ended every request in flight with an error) or
the watchdog finds it hung (it is killed, with the same effect), new requests get a 503
``engine_restarting`` with ``Retry-After`` while a new core starts after a back-off (1 s, 2 s,
4 s, ... up to ``core_restart_backoff_max_s``) and loads the model. The tokenizer stays loaded.
More than ``core_restart_limit`` restarts within ``core_restart_window_s`` means a fault that a
new core does not cure: the supervisor gives up and asks the server to exit with
``EXIT_CRASH_LOOP``, so that whatever runs the server (the native launcher, compose,
Kubernetes) starts a fresh process.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import time
from collections.abc import Callable, Iterator

from . import messages as m
from .core_client import CoreClient, EngineDeadError, RequestStream
from .detokenizer import StepDecoder
from .metrics import EngineMetrics
from .settings import EngineSettings
from .watchdog import ProgressWatch, Sample

log = logging.getLogger("genmesh.engine.supervisor")

EXIT_CRASH_LOOP = 75  # EX_TEMPFAIL: a temporary failure; run me again
CoreFactory = Callable[[Iterator[int]], CoreClient]


class EngineRestarting(EngineDeadError):
    """The core is being replaced; try again after ``retry_after_s``."""

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class RestartPolicy:
    """Exponential back-off between restarts, and at most ``limit`` restarts per sliding window."""

    def __init__(self, backoff_s: float, backoff_max_s: float, limit: int, window_s: float) -> None:
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.limit = limit
        self.window_s = window_s
        self._restarts: list[float] = []

    def next_delay(self, now: float) -> float | None:
        """Seconds to wait before the next restart, or None: past the cap, give up."""
        self._restarts = [t for t in self._restarts if now - t < self.window_s]
        if len(self._restarts) >= self.limit:
            return None
        self._restarts.append(now)
        return min(self.backoff_max_s, self.backoff_s * 2.0 ** (len(self._restarts) - 1))


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
        self._ids = itertools.count(1)  # shared by every core of this model
        self.settings = settings
        self.metrics = metrics
        self._on_fatal = on_fatal
        self.policy = RestartPolicy(
            settings.core_restart_backoff_s,
            settings.core_restart_backoff_max_s,
            settings.core_restart_limit,
            settings.core_restart_window_s,
        )
        self.core: CoreClient | None = None
        self._exited: asyncio.Future[str] | None = None
        self._decoder: Callable[[], StepDecoder] | None = None
        self._task: asyncio.Task[None] | None = None
        self.restarting = False
        self.failed: str | None = None  # set when the supervisor gave up
        self.last_failure: str | None = None
        self._cause = "exited"
        self._restart_at = 0.0
        self._down_at = 0.0
        self._up_since: float | None = None
        self.load_s = 0.0  # how long the last core took to load: the Retry-After estimate
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

    def add(self, prompt_ids: list[int], params: m.SamplingParams, skip_special_tokens: bool = True) -> RequestStream:
        if self.restarting:
            raise EngineRestarting(self.unavailable_reason(), self.retry_after_s())
        if self.core is None or self.failed is not None:
            raise EngineDeadError(self.unavailable_reason())
        return self.core.add(prompt_ids, params, skip_special_tokens)

    def abort(self, request_id: int) -> None:
        if self.core is not None:
            self.core.abort(request_id)

    def scoring_core(self) -> CoreClient:
        """The core that scoring sessions (scoring.py) talk to; raises like ``add`` when there is none."""
        if self.restarting:
            raise EngineRestarting(self.unavailable_reason(), self.retry_after_s())
        if self.core is None or self.failed is not None:
            raise EngineDeadError(self.unavailable_reason())
        return self.core

    # -- life cycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the first core and wait for its model to load (the caller loads the tokenizer meanwhile)."""
        self.core = await self._spawn()

    def attach_decoder(self, make: Callable[[], StepDecoder]) -> None:
        """The tokenizer is loaded: give the core its decoder (and each later core a fresh one) and
        start supervising."""
        assert self.core is not None, "start() first"
        self._decoder = make
        self.core.attach_decoder(make())
        self._task = asyncio.create_task(self._supervise(), name=f"supervise-{self.model}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.core is not None:
            await self.core.close()

    async def _spawn(self) -> CoreClient:
        core = self._make_core(self._ids)
        exited: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def on_exit(reason: str) -> None:
            self.restarting = self.failed is None  # from now on new requests hear "restarting"
            self.last_failure = reason
            self._restart_at = self._down_at = time.monotonic()
            if not exited.done():
                exited.set_result(reason)

        core.on_exit = on_exit
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
            sample = Sample(stats.steps, stats.tokens, len(core.streams), core.stalled_for(), core.has_unread_output())
            hung = watch.check(time.monotonic(), sample)
            if hung is not None and core.dead_reason is None:
                self._cause = "hung"
                self.restarting = True
                self._restart_at = self._down_at = time.monotonic()
                core.kill(f"engine core hung: {hung}; killed")

    async def _replace(self, reason: str) -> bool:
        """Start a new core, after the back-off; retry while the cap allows. False: gave up."""
        cause = self._cause
        while True:
            delay = self.policy.next_delay(time.monotonic())
            if delay is None:
                self._give_up(reason)
                return False
            self.restarting = True
            self._restart_at = time.monotonic() + delay
            log.warning("model %s: %s; a new engine core starts in %.1f s", self.model, reason, delay)
            await asyncio.sleep(delay)
            self.metrics.core_restarted(cause)
            try:
                core = await self._spawn()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = f"a new engine core failed to start: {exc or type(exc).__name__}"
                cause = "start_failed"
                self.last_failure = reason
                log.error("model %s: %s", self.model, reason)
                continue
            assert self._decoder is not None
            core.attach_decoder(self._decoder())
            self.core = core
            self.restarting = False
            log.warning(
                "model %s: engine core replaced (pid %s), serving again %.1f s after it went down",
                self.model,
                core.core_pid,
                time.monotonic() - self._down_at,
            )
            return True

    def _give_up(self, reason: str) -> None:
        p = self.policy
        self.restarting = False
        self.failed = (
            f"engine core failed again after {p.limit} restart(s) within {p.window_s:g} s (last: {reason}); "
            f"the server exits (status {EXIT_CRASH_LOOP}) so that it is started afresh"
        )
        log.critical("model %s: %s", self.model, self.failed)
        if self._on_fatal is not None:
            self._on_fatal(EXIT_CRASH_LOOP)
