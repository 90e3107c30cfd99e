"""Per-process CPU and memory of a run: real child processes (a tree with a grandchild) burn CPU and
hold memory, and the meter must charge both to the right root."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from genmesh.bench.results import BENCH_CLIENT, Load, StealMeter, make_result, sample, tree_name
from support.polling import wait_until

# A parent that starts a child; the child holds 200 MiB and spins until killed.
CHILD = "b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('ready', flush=True)\nwhile True: pass"
PARENT = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {CHILD!r}])"


@pytest.fixture
def busy_tree() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", PARENT])
    try:
        yield proc
    finally:
        for pid in [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]:
            os.kill(pid, 9)
        proc.kill()
        proc.wait(10)


def test_a_tree_is_charged_its_descendants_cpu_and_memory(busy_tree: subprocess.Popen[bytes]) -> None:
    root = busy_tree.pid
    wait_until(lambda: sample([root])[root].rss_mib > 200, 30, what="the grandchild's 200 MiB")
    before = sample([root])[root].cpu_s
    wait_until(lambda: sample([root])[root].cpu_s - before > 0.3, 30, what="the grandchild spinning")
    with StealMeter([os.getpid(), root]) as meter:
        start = sample([root])[root].cpu_s
        wait_until(lambda: sample([root])[root].cpu_s - start > 0.3, 30, what="0.3 s more CPU")
    by_name = {str(p["process"]): p for p in meter.processes}
    assert set(by_name) == {BENCH_CLIENT, os.path.basename(sys.executable)}  # python -c: the executable
    tree = by_name[os.path.basename(sys.executable)]
    assert float(tree["cpu_s"]) > 0.3
    assert float(tree["rss_mib"]) > 200

    result = make_result("r", Load(1.0, []), meter, output_tokens=100)
    charged = {p["process"]: p["cpu_ms_per_token"] for p in result["processes"]}
    assert charged[tree["process"]] == pytest.approx(1000.0 * float(tree["cpu_s"]) / 100)


def test_a_module_server_is_named_by_its_module() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"])
    try:
        # (polled: between fork and exec the child still has its parent's command line)
        wait_until(lambda: sample([proc.pid])[proc.pid].name == "http.server", 30, what="named http.server")
        assert sample([os.getpid()])[os.getpid()].name == BENCH_CLIENT
    finally:
        proc.kill()
        proc.wait(10)


def test_a_server_the_bench_started_is_not_charged_to_the_bench_client(busy_tree: subprocess.Popen[bytes]) -> None:
    root = busy_tree.pid  # a child of this process, as the report's servers are
    wait_until(lambda: sample([root])[root].rss_mib > 200, 30, what="the grandchild's 200 MiB")
    both = sample([os.getpid(), root])
    assert both[root].rss_mib > 200
    assert both[os.getpid()].rss_mib < sample([os.getpid()])[os.getpid()].rss_mib - 150  # without the tree below


SPAWNING = "import multiprocessing as mp, time\nmp.get_context('spawn').Process(target=time.sleep, args=(600,)).start()"


def test_a_servers_spawned_worker_is_measured_apart_as_its_core() -> None:
    """The engine's core process (multiprocessing, spawn) is a tree of its own, named after its server, so
    the report shows the API process's CPU apart from the model's; the bench client's own worker is not split."""
    proc = subprocess.Popen([sys.executable, "-c", SPAWNING])
    try:
        wait_until(lambda: len(sample([proc.pid])) == 2, 60, what="the spawned worker measured apart")
        trees = sample([proc.pid])
        worker = next(pid for pid in trees if pid != proc.pid)
        assert trees[worker].name == f"{trees[proc.pid].name} core"
        assert psutil.Process(worker).ppid() == proc.pid
        assert len(sample([os.getpid()])) == 1  # the bench client is never split
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait(10)


def test_a_tree_is_named_by_its_python_module_or_else_its_executable() -> None:
    """``python -m genmesh.engine`` is ``engine``; llama-server's ``-m MODEL`` names a model, not a module."""
    waits = "import sys; sys.stdin.read()"  # both wait on stdin, so each is alive while it is named
    procs = [subprocess.Popen([sys.executable, "-c", waits, "-m", "genmesh.engine"], stdin=subprocess.PIPE)]
    procs.append(subprocess.Popen(["/bin/sh", "-c", "read x", "-m", "model.gguf"], stdin=subprocess.PIPE))
    try:
        assert [tree_name(psutil.Process(p.pid)) for p in procs] == ["engine", "sh"]
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
