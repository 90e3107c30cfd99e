"""The core watchdog's judgement (progress, not liveness) and the restart policy's back-off and cap."""

from __future__ import annotations

import time

from genmesh.engine.client.supervisor import CoreSupervisor, RestartPolicy
from genmesh.engine.client.watchdog import ProgressWatch, Sample
from genmesh.engine.metrics import EngineMetrics, MetricFamilies
from genmesh.engine.settings import EngineSettings


def sample(steps: int, tokens: int, in_flight: int, silent_s: float = 0.0, unread: bool = False) -> Sample:
    return Sample(steps, tokens, in_flight, silent_s, unread)


def test_busy_without_progress_is_hung_only_after_the_timeout() -> None:
    w = ProgressWatch(30)
    assert w.check(0, sample(10, 100, 4)) is None
    assert w.check(29, sample(10, 100, 4, silent_s=0.5)) is None
    hung = w.check(30, sample(10, 100, 4, silent_s=0.5))
    assert hung is not None
    assert "no progress for 30 s with 4 request(s) in flight" in hung


def test_progress_resets_the_clock() -> None:
    w = ProgressWatch(30)
    w.check(0, sample(10, 100, 4))
    assert w.check(25, sample(11, 100, 4)) is None  # a step (a prefill chunk) is progress
    assert w.check(50, sample(11, 101, 4)) is None  # so is a token
    assert w.check(79, sample(11, 101, 4)) is None
    assert w.check(80, sample(11, 101, 4)) is not None


def test_idle_is_not_hung_but_silence_is() -> None:
    w = ProgressWatch(30)
    w.check(0, sample(5, 5, 0))
    assert w.check(500, sample(5, 5, 0, silent_s=0.9)) is None  # idle, heartbeats arriving
    # work arrives after a long idle spell: the clock starts when the work does
    assert w.check(501, sample(5, 5, 1, silent_s=0.9)) is None
    assert w.check(530, sample(5, 5, 1, silent_s=0.9)) is None
    assert w.check(531, sample(5, 5, 1, silent_s=0.9)) is not None
    idle = ProgressWatch(30)
    idle.check(0, sample(5, 5, 0))
    hung = idle.check(40, sample(5, 5, 0, silent_s=31))
    assert hung is not None
    assert "no word" in hung


def test_unread_output_means_the_api_process_lags_not_the_core() -> None:
    w = ProgressWatch(30)
    w.check(0, sample(1, 1, 2))
    assert w.check(40, sample(1, 1, 2, silent_s=40, unread=True)) is None
    assert w.check(60, sample(1, 1, 2, silent_s=60)) is not None


def test_zero_turns_the_watchdog_off() -> None:
    w = ProgressWatch(0)
    w.check(0, sample(1, 1, 2))
    assert w.check(10_000, sample(1, 1, 2, silent_s=10_000)) is None


def test_restart_back_off_doubles_and_the_cap_counts_per_window() -> None:
    p = RestartPolicy(backoff_s=1, backoff_max_s=5, limit=4, window_s=100, stable_s=60)
    assert [p.next_delay(t) for t in (0, 1, 2, 3)] == [1, 2, 4, 5]
    assert p.next_delay(4) is None  # a fifth restart within 100 s: give up
    assert p.next_delay(100.5) == 5  # the first restart has left the window
    fresh = RestartPolicy(backoff_s=1, backoff_max_s=30, limit=5, window_s=10, stable_s=60)
    assert fresh.next_delay(0) == 1
    assert fresh.next_delay(20) == 1  # the window emptied: back to the short back-off


def test_a_core_that_served_a_stable_while_restarts_after_the_short_back_off() -> None:
    """Issue 54: five deaths in ten minutes, each after minutes of serving, each wait 1 s; cores that
    die young double it as before, and the window's cap still counts every restart."""
    p = RestartPolicy(backoff_s=1, backoff_max_s=30, limit=5, window_s=600, stable_s=60)
    assert [p.next_delay(t, served_s=100) for t in (0, 100, 200, 300, 400)] == [1, 1, 1, 1, 1]
    assert p.next_delay(500, served_s=100) is None  # the sixth restart within 600 s: give up, served or not
    young = RestartPolicy(backoff_s=1, backoff_max_s=30, limit=5, window_s=600, stable_s=60)
    assert [young.next_delay(t, served_s=59) for t in (0, 60, 120)] == [1, 2, 4]
    assert young.next_delay(240, served_s=60) == 1  # served its stable minute: back to 1 s
    assert young.next_delay(242, served_s=0) == 2  # then a core that failed to start doubles again


def test_a_zero_limit_never_restarts() -> None:
    assert RestartPolicy(1, 30, 0, 600, 60).next_delay(0) is None


class _Core:
    """What the supervisor needs of a core that starts at once (a real one loads the model)."""

    alive = True
    core_pid = 1

    def __init__(self) -> None:
        self.on_exit: object = None
        self.on_step: object = None

    async def start(self, timeout_s: float) -> None:
        pass

    async def close(self) -> None:
        pass


async def test_the_supervisor_passes_how_long_the_dead_core_served() -> None:
    """Issue 54: the supervisor's back-off after a core that served a minute or more is the first one
    again; after cores that died young it doubles. Its waits are recorded, not slept."""
    sup = CoreSupervisor("m", _Core, EngineSettings(), EngineMetrics("m", MetricFamilies()))  # type: ignore[arg-type]
    waits: list[float] = []

    async def wait(delay: float) -> None:
        waits.append(delay)

    sup.sleep = wait
    await sup.start()
    for served_s in (120.0, 0.5, 0.5, 61.0, 0.5):
        now = time.monotonic()
        sup._up_since, sup._down_at = now - served_s, now  # how long this core served before it died
        assert await sup._replace("engine core process exited")
    assert waits == [1.0, 2.0, 4.0, 1.0, 2.0]
