"""If the engine-core process dies: in-flight requests end with an error, /health turns 503."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from support.servers import Server, start_engine, wait_until


@pytest.fixture
def doomed_engine(tmp_path: Path) -> Iterator[Server]:
    server = start_engine(tmp_path)
    yield server
    server.stop()


def core_process(server: Server) -> psutil.Process:
    children = psutil.Process(server.proc.pid).children(recursive=True)
    cores = [c for c in children if c.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(c.cmdline())]
    assert len(cores) == 1, [c.cmdline() for c in children]
    return cores[0]


@pytest.mark.slow
def test_core_death_fails_inflight_and_health(doomed_engine: Server) -> None:
    url = doomed_engine.url
    body = {"prompt": "Tell a long story.", "max_tokens": 4000, "ignore_eos": True, "stream": True}
    payloads: list[str] = []
    core = core_process(doomed_engine)
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            payloads.append(line[6:])
            if len(payloads) == 3:
                core.kill()
    # the stream ended (did not hang) with an error event and [DONE]
    assert payloads[-1] == "[DONE]"
    err = json.loads(payloads[-2])["error"]
    assert err["type"] == "service_unavailable_error"
    assert "exited" in err["message"]
    wait_until(lambda: httpx.get(url + "/health").status_code == 503, 5, what="/health 503")
    r = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "engine_unavailable"
    assert doomed_engine.proc.poll() is None, "the API process itself stays up to report the failure"


@pytest.mark.slow
def test_a_failed_step_ends_the_core_instead_of_limping_on(doomed_engine: Server) -> None:
    # A valid JSON schema that the grammar compiler cannot build (a lookahead) fails inside step();
    # OpenVINO's pipeline is unusable after that, so the core must exit and the engine say so.
    schema = {"type": "string", "pattern": "(?=a)b"}
    body = {
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 5,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    }
    r = httpx.post(doomed_engine.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 500, r.text
    assert "engine step failed" in r.json()["error"]["message"]

    def unhealthy() -> bool:
        return httpx.get(doomed_engine.url + "/health", timeout=5).status_code == 503

    wait_until(unhealthy, 30, what="/health 503 after the core exited")
    assert "exit code 3" in httpx.get(doomed_engine.url + "/health", timeout=5).json()["reason"]
    after = httpx.post(doomed_engine.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30)
    assert after.status_code == 503
