"""Keeping the native mesh's children running, as compose's ``restart: unless-stopped`` does.

A child that exits (a crash, a kill, or a service that gave up on purpose, such as an engine
whose core keeps dying) is started again after a back-off (1 s, doubling up to 30 s, back to 1 s
once a child has stayed up for a minute), while its siblings keep running. Each death is
logged with its exit status and time, and each return with the time it took to be ready again.
Standard library only, like the launcher.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class Child(Protocol):
    """One supervised process: its name, its current process, and its readiness check."""

    @property
    def name(self) -> str: ...

    @property
    def proc(self) -> subprocess.Popen[bytes] | None: ...

    @property
    def ready(self) -> Callable[[], bool]: ...

    @property
    def started_at(self) -> float: ...  # time.monotonic() when its current process was started


C = TypeVar("C", bound=Child)


@dataclass(frozen=True)
class RestartPolicy:
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    stable_s: float = 60.0  # up this long: the next restart starts from backoff_s again
    start_timeout_s: float = 600.0  # a restarted child not ready by then is killed and tried again

    def delay(self, restarts_in_a_row: int) -> float:
        return min(self.backoff_max_s, self.backoff_s * 2.0 ** max(0, restarts_in_a_row - 1))


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def reason_in_log(lines: Iterable[str]) -> str | None:
    """Why a genmesh service stopped, from its last lines of output: its last error logged by a
    genmesh logger (the services log JSON lines), else its last line naming the program
    (``genmesh-engine: ...``, what a refused start-up prints); None when neither is there."""
    for line in reversed(list(lines)):
        text = line.strip()
        if text.startswith("{"):
            try:
                record = json.loads(text)
            except ValueError:
                continue
            if (
                isinstance(record, dict)
                and record.get("level") in ("ERROR", "CRITICAL")
                and str(record.get("name", "")).startswith("genmesh")
            ):
                return str(record.get("message", "")).strip() or None
        elif text.startswith("genmesh-"):
            return text
    return None


def clock() -> str:
    return time.strftime("%H:%M:%S")


@dataclass
class _Watched(Generic[C]):
    child: C
    state: str = "running"  # running | waiting (back-off) | starting
    down_at: float = 0.0  # when it last died
    next_start: float = 0.0
    in_a_row: int = 0  # restarts since the child was last stable
    restarts: int = 0


class Supervisor(Generic[C]):
    def __init__(
        self,
        children: Sequence[C],
        spawn: Callable[[C], None],
        stopping: threading.Event,
        say: Callable[[str], None],
        policy: RestartPolicy = RestartPolicy(),
        poll_s: float = 0.2,
    ) -> None:
        self.watched = [_Watched(c) for c in children]
        self.spawn = spawn
        self.stopping = stopping
        self.say = say
        self.policy = policy
        self.poll_s = poll_s

    def run(self) -> int:
        """Watch until asked to stop (Ctrl-C, SIGTERM); 0 then."""
        while not self.stopping.is_set():
            for w in self.watched:
                self._step(w, time.monotonic())
            self.stopping.wait(self.poll_s)
        return 0

    def _step(self, w: _Watched[C], now: float) -> None:
        proc = w.child.proc
        if w.state == "waiting":
            if now >= w.next_start:
                w.restarts += 1
                self.say(f"restarting {w.child.name} (restart {w.restarts})")
                self.spawn(w.child)
                w.state = "starting"
            return
        assert proc is not None
        code = proc.poll()
        if code is not None:
            self._died(w, code, now)
        elif w.state == "starting":
            if w.child.ready():
                w.state = "running"
                self.say(f"{w.child.name} is back at {clock()}: {now - w.down_at:.1f} s after it went down")
            elif now - w.child.started_at > self.policy.start_timeout_s:
                self.say(f"{w.child.name} not ready {self.policy.start_timeout_s:.0f} s after its restart; killing it")
                proc.kill()

    def _died(self, w: _Watched[C], code: int, now: float) -> None:
        up_s = now - w.child.started_at
        if w.state == "running" and up_s >= self.policy.stable_s:
            w.in_a_row = 0
        w.in_a_row += 1
        delay = self.policy.delay(w.in_a_row)
        if w.state == "running":
            w.down_at = now
        what = "exited" if w.state == "running" else "exited during its restart"
        self.say(
            f"{w.child.name} {what} with {describe_exit(code)} at {clock()} (up {up_s:.1f} s); "
            f"restarting it in {delay:.1f} s, the others keep running"
        )
        w.state, w.next_start = "waiting", now + delay
