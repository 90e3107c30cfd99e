"""The report's llama-server peer runs in llama.cpp's default (repacked) form where that works, and with
``--no-repack`` only where that form exits, is never ready or fails its first request, saying which in its
settings line (``servers.start_peer``).

The llama-server here is a fake (tests/support/fake_llama_server.py): the failure it stands for, llama.cpp's
AMX repack crashing with SIGSEGV, happens only on Sapphire Rapids CPUs with AMX, not on this machine, and a real
llama-server needs a 12-minute build (``make llama-cpp``). The real one is measured in docs/benchmarking.md.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from genmesh.bench import servers
from genmesh.bench.servers import NO_REPACK, StartFailed, free_port, listens, llama_peer, start, start_peer

FAKE = Path(__file__).parents[1] / "support" / "fake_llama_server.py"


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An executable named llama-server that runs the fake; each start's argv is logged to ``argv.jsonl``."""
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    binary.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    binary.chmod(0o755)
    monkeypatch.setenv("FAKE_LLAMA_ARGV", str(tmp_path / "argv.jsonl"))
    return binary


@pytest.fixture
def squatter(fake: Path, tmp_path: Path) -> Iterator[int]:
    """Another process's server on a loopback port, answering ``/health`` and chat as ours would."""
    argv = [str(fake), "--no-repack", "--port", servers.PORT]
    with start("squatter", argv, tmp_path / "squatter.log", 30.0) as server:
        yield int(server.url.rsplit(":", 1)[1])


def starts(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "argv.jsonl").read_text().splitlines()]


def test_the_default_form_runs_where_it_works_without_no_repack(
    fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_LLAMA_CRASH", "never")
    peer = llama_peer("m.gguf", True, 4, 2, binary=fake)
    with start_peer(peer, tmp_path / "llama.log") as server:
        assert httpx.get(server.url + "/health").status_code == 200
        assert "--no-repack" not in server.proc.args  # type: ignore[operator]
    assert [("--no-repack" in argv) for argv in starts(tmp_path)] == [False]  # started once, repacked
    assert peer.form == NO_REPACK.default == "weights repacked where llama.cpp can (its default)"
    assert peer.described.endswith("; weights repacked where llama.cpp can (its default)")
    assert "--no-repack" not in peer.settings


@pytest.mark.parametrize("where", ["start", "request"])
def test_where_the_default_form_crashes_it_runs_again_with_no_repack(
    fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.setenv("FAKE_LLAMA_CRASH", where)
    peer = llama_peer("m.gguf", True, 4, 2, binary=fake)
    with start_peer(peer, tmp_path / "llama.log") as server:
        reply = httpx.post(server.url + "/v1/chat/completions", json={"messages": [], "max_tokens": 1})
        assert reply.status_code == 200  # the --no-repack form serves
        assert server.proc.args[-1] == "--no-repack"  # type: ignore[index]
    assert [("--no-repack" in argv) for argv in starts(tmp_path)] == [False, True]
    when = "on start" if where == "start" else "on its first request"
    assert peer.form == f"`--no-repack`: the default form exited with code -11 (SIGSEGV) {when}"
    assert peer.described.endswith(peer.form)
    assert (tmp_path / "llama--no-repack.log").is_file()  # the second form's output beside the first's


def test_where_both_forms_fail_the_peer_fails_to_start(
    fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_LLAMA_CRASH", "always")
    peer = llama_peer("m.gguf", True, 4, 2, binary=fake)
    with pytest.raises(StartFailed, match=r"llama exited with code -11 \(SIGSEGV\) on start"):
        start_peer(peer, tmp_path / "llama.log")
    assert len(starts(tmp_path)) == 2
    assert peer.form == ""


def test_a_peer_without_a_fallback_starts_once_as_given(
    fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_LLAMA_CRASH", "start")
    peer = llama_peer("m.gguf", True, 4, 2, binary=fake, fallback=None)  # genmesh-bench levers --llama-variant
    with pytest.raises(StartFailed, match="on start"):
        start_peer(peer, tmp_path / "llama.log")
    assert len(starts(tmp_path)) == 1


def test_the_settings_line_names_the_build_arguments_of_the_binary_that_runs(fake: Path) -> None:
    """A llama-server built with LLAMA_CPP_CMAKE_ARGS (e.g. an AVX2-only peer on a newer CPU) says so; the
    build script writes them beside the binary (CMAKE_ARGS), and ``--llama-binary`` picks that binary."""
    assert "built with `-DGGML_NATIVE=ON`;" in llama_peer("m.gguf", True, 4, 2, binary=fake).settings
    (fake.parent.parent / "CMAKE_ARGS").write_text("-DGGML_NATIVE=OFF -DGGML_AVX2=ON\n")
    peer = llama_peer("m.gguf", True, 4, 2, binary=fake)
    assert "built with `-DGGML_NATIVE=ON -DGGML_NATIVE=OFF -DGGML_AVX2=ON`;" in peer.settings
    assert peer.argv[0] == str(fake)


def test_a_port_another_process_took_is_left_for_a_new_one(
    fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, squatter: int
) -> None:
    """A free port is free only when chosen: another process may bind it first. Its server answers ``/health``
    for ours (once, this took the peer's place in `make test`), so ``start`` checks the port is its own."""
    monkeypatch.setenv("FAKE_LLAMA_CRASH", "never")
    ports = iter([squatter, free_port()])
    monkeypatch.setattr(servers, "free_port", lambda: next(ports))
    with start("llama", [str(fake), "--port", servers.PORT], tmp_path / "llama.log", 30.0) as server:
        port = int(server.url.rsplit(":", 1)[1])
        assert port != squatter
        assert listens(server.proc, port)
        assert httpx.get(server.url + "/health").status_code == 200
    assert starts(tmp_path)[-1] == ["--port", str(port)]  # (ours on the squatter's port may have been stopped
    # before it logged its start: the squatter answered at once)


def test_where_every_port_is_taken_the_server_fails_to_start(
    fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, squatter: int
) -> None:
    monkeypatch.setattr(servers, "free_port", lambda: squatter)
    with pytest.raises(StartFailed, match=f"found its port taken by another process {servers.PORT_TRIES} times"):
        start("llama", [str(fake), "--port", servers.PORT], tmp_path / "llama.log", 30.0)
    assert servers.answers(f"http://127.0.0.1:{squatter}/health")  # the other process's server is left alone
