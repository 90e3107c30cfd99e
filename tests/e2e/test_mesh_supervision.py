"""The launcher's supervisor restarts a child that exits, with back-off, and leaves its siblings alone."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from mesh_supervision import RestartPolicy, Supervisor, describe_exit, reason_in_log
from support.polling import wait_until


@dataclass
class Child:
    name: str
    code: str  # python source the child runs
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    spawned: list[int] = field(default_factory=list)

    def ready(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture
def children() -> Iterator[list[Child]]:
    made: list[Child] = []
    yield made
    for c in made:
        if c.proc is not None and c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait(10)


def spawn(c: Child) -> None:
    c.started_at = time.monotonic()
    c.proc = subprocess.Popen([sys.executable, "-c", c.code])
    c.spawned.append(c.proc.pid)


def supervise(kids: list[Child], policy: RestartPolicy) -> tuple[threading.Event, list[str], Callable[[], None]]:
    stopping = threading.Event()
    said: list[str] = []
    sup = Supervisor(kids, spawn, stopping, said.append, policy, poll_s=0.02)
    runner = threading.Thread(target=sup.run, daemon=True)
    runner.start()

    def stop() -> None:
        stopping.set()
        runner.join(5)
        assert not runner.is_alive()

    return stopping, said, stop


def test_a_child_that_exits_is_restarted_with_back_off_and_its_sibling_keeps_running(children: list[Child]) -> None:
    steady = Child("steady", "import time; time.sleep(60)")
    flaky = Child("flaky", "import sys; sys.exit(3)")
    children += [steady, flaky]
    for c in children:
        spawn(c)
    _, said, stop = supervise(children, RestartPolicy(backoff_s=0.05, backoff_max_s=0.2, stable_s=60))
    wait_until(lambda: len(flaky.spawned) >= 4, 10, what="the flaky child to be restarted three times")
    stop()
    assert steady.spawned == [steady.spawned[0]]
    assert steady.proc is not None
    assert steady.proc.poll() is None  # never stopped
    deaths = [line for line in said if line.startswith("flaky exited")]
    assert "exit code 3" in deaths[0]
    assert "restarting it in 0.1 s" in deaths[1]  # 0.05, then doubled
    assert any("restarting it in 0.2 s" in line for line in deaths[2:])  # capped
    assert not any(line.startswith("steady") for line in said)


def test_a_restarted_child_is_reported_back_when_ready(children: list[Child]) -> None:
    server = Child("server", "import time; time.sleep(60)")
    children.append(server)
    spawn(server)
    _, said, stop = supervise(children, RestartPolicy(backoff_s=0.05))
    assert server.proc is not None
    server.proc.kill()
    wait_until(lambda: any(line.startswith("server is back") for line in said), 10, what="the child back")
    stop()
    assert len(server.spawned) == 2
    assert "signal SIGKILL" in said[0]


def test_exit_descriptions() -> None:
    assert describe_exit(0) == "exit code 0"
    assert describe_exit(75) == "exit code 75"
    assert describe_exit(-9) == "signal SIGKILL"


def test_a_services_reason_is_its_last_genmesh_error_or_its_refusal() -> None:
    def line(level: str, name: str, message: str) -> str:
        return json.dumps({"time": "t", "level": level, "name": name, "request_id": "-", "message": message}) + "\n"

    died = "engine core process exited: killed by SIGFPE (Floating point exception; exit code -8) while loading"
    lines = [
        line("INFO", "genmesh.engine", "starting engine core"),
        line("ERROR", "genmesh.engine.client.core_client", died),
        line("ERROR", "uvicorn.error", "Traceback (most recent call last): ..."),
        line("ERROR", "uvicorn.error", "Application startup failed. Exiting."),
    ]
    assert reason_in_log(lines) == died
    refused = "genmesh-engine: model 'm' cannot be served: plugin config INFERENCE_PRECISION_HINT=bf16 ..."
    assert reason_in_log([line("INFO", "genmesh.engine", "x"), refused + "\n"]) == refused
    assert reason_in_log([line("INFO", "genmesh.engine", "x"), "plain text\n", "{not json\n"]) is None
