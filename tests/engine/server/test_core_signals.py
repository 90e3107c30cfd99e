"""A core killed by a signal is named by it, and one that dies of SIGFPE while loading the model is
not started again and again. The real engine; the test sends SIGFPE to the core process it started
(through its engine) while that core loads the model, which is how OpenVINO's one-thread AMX crash
looks from outside (the guard that avoids it: tests/engine/unit/test_amx_guard.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from genmesh.bench.servers import free_port
from genmesh.engine.client.core_exit import EXIT_LOAD_CRASH, certain_to_repeat, describe_exit
from support.polling import wait_until
from support.servers import DEFAULT_MODEL, GENMESH_ENGINE_ONLY, ROOT, Server, start_engine

sys.path.insert(0, str(ROOT / "scripts"))
from mesh_supervision import reason_in_log

pytestmark = GENMESH_ENGINE_ONLY


def test_describe_exit_names_the_signal_and_when() -> None:
    fpe = describe_exit(-8, loading=True)
    assert fpe.startswith("engine core process exited: killed by SIGFPE (Floating point exception; exit code -8)")
    assert "while loading the model" in fpe
    assert "genmesh.engine.core log line" in fpe  # where to look
    assert "openvinotoolkit/openvino#33300" in fpe
    for code, name in ((-11, "SIGSEGV"), (-4, "SIGILL"), (-9, "SIGKILL"), (-7, "SIGBUS"), (-6, "SIGABRT")):
        assert f"killed by {name} (" in describe_exit(code, loading=False)
    assert describe_exit(-9, loading=False).endswith("exit code -9) while serving")
    assert describe_exit(3, loading=False) == "engine core process exited (exit code 3) while serving"
    assert describe_exit(None, loading=True) == "engine core process exited (exit code None) while loading the model"


def test_only_a_trap_while_loading_is_certain_to_repeat() -> None:
    assert certain_to_repeat(-signal.SIGFPE, loading=True)
    assert certain_to_repeat(-signal.SIGILL, loading=True)
    assert not certain_to_repeat(-signal.SIGFPE, loading=False)  # after it served: replaced as any crash
    assert not certain_to_repeat(-signal.SIGKILL, loading=True)  # the OOM killer, an operator
    assert not certain_to_repeat(-signal.SIGSEGV, loading=True)
    assert not certain_to_repeat(1, loading=True)


def cores(engine_pid: int) -> list[psutil.Process]:
    found = []
    for c in psutil.Process(engine_pid).children(recursive=True):
        try:
            if c.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(c.cmdline()):
                found.append(c)
        except psutil.NoSuchProcess:
            continue
    return found


def trap_the_loading_core(engine: subprocess.Popen[bytes], but_not: int | None = None) -> int:
    """SIGFPE to the engine's core process as soon as it exists (it then imports OpenVINO and
    builds the pipeline: seconds). Returns its pid."""
    found: list[psutil.Process] = []

    def spawned() -> bool:
        assert engine.poll() is None, "the engine exited before its core started"
        found[:] = [c for c in cores(engine.pid) if c.pid != but_not]
        return bool(found)

    wait_until(spawned, 120, interval_s=0.01, what="the engine core process")
    found[0].send_signal(signal.SIGFPE)
    return found[0].pid


@pytest.mark.slow
def test_a_core_that_dies_of_sigfpe_at_start_up_names_it(tmp_path: Path) -> None:
    log_path = tmp_path / "engine.log"
    port = free_port()
    argv = [sys.executable, "-m", "genmesh.engine", "--model", str(DEFAULT_MODEL), "--port", str(port)]
    with log_path.open("wb") as out:
        proc = subprocess.Popen([*argv, "--cache-size", "1"], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    server = Server("engine", proc, f"http://127.0.0.1:{port}", log_path)
    try:
        trap_the_loading_core(proc)
        assert proc.wait(60) != 0  # a single model that cannot load stops the server
    finally:
        server.stop()
    lines = log_path.read_text(errors="replace").splitlines()
    reason = reason_in_log(lines)  # what the launcher reports as the engine's reason
    assert reason is not None
    assert reason.startswith("engine core process exited: killed by SIGFPE")
    assert "while loading the model" in reason


@pytest.mark.slow
def test_a_replacement_core_that_dies_of_sigfpe_while_loading_is_not_started_again(tmp_path: Path) -> None:
    engine = start_engine(tmp_path, "--core-restart-backoff-s", "0.2", "--core-restart-limit", "5")
    try:
        (first,) = cores(engine.proc.pid)
        first.kill()  # a crash while serving: replaced
        trap_the_loading_core(engine.proc, but_not=first.pid)  # its replacement traps while loading
        assert engine.proc.wait(60) == EXIT_LOAD_CRASH
    finally:
        engine.stop()
    log = engine.log_tail(200)
    assert "killed by SIGKILL" in log
    assert "while serving" in log
    assert "killed by SIGFPE" in log
    assert "a new core would die the same way: the server exits (status 70)" in log
    assert log.count("a new engine core starts in") == 1  # one restart (after the SIGKILL), none after the SIGFPE
