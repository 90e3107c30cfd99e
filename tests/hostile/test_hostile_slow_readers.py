"""Clients that stop reading a stream, on the real gateway in front of the real microservice and
engine: the send deadline cuts them off, their generation stops (the engine's running gauge drops)
and their gateway slot is free again; a client that drops its connection frees it at once."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from genmesh.gateway.redis_keys import KeySpace
from support.gateway_helpers import launch_gateway
from support.hostile import CHAT, connect, record, request_head, route_to, start_microservice
from support.polling import wait_until
from support.servers import MODEL_NAME, Server, engine_running

SEND_TIMEOUT_S = 2.0
MAX_TOKENS = 3000  # about a minute of generation on this machine: far longer than the deadline


@dataclass
class SlowMesh:
    engine_url: str
    microservice: Server
    gateway: Server
    redis: object

    def slots_held(self) -> int:
        upstream = self.microservice.url.removeprefix("http://")
        key = KeySpace().model(MODEL_NAME, [upstream]).slots[0]
        return int(self.redis.client().zcount(key, int(time.time() * 1000), "+inf"))  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def slow_mesh(
    engine_url: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[SlowMesh]:
    redis = request.getfixturevalue("redis_server")
    logs = tmp_path_factory.mktemp("slow-readers")
    deadline = ("--send-timeout-s", str(SEND_TIMEOUT_S))
    microservice = start_microservice(logs, engine_url, *deadline)
    try:
        config = logs / "gateway.yaml"
        config.write_text(json.dumps(route_to(microservice.url, 1, max_queue_wait_s=60)))
        gateway = launch_gateway(logs, config, redis.url, *deadline)
        try:
            yield SlowMesh(engine_url, microservice, gateway, redis)
        finally:
            gateway.stop()
    finally:
        microservice.stop()


def _open_stream(url: str) -> object:
    """A stream whose client reads its first event, then nothing more (a 4 KB receive buffer)."""
    sock = connect(url, rcvbuf=4096)
    body = json.dumps(
        {
            "model": MODEL_NAME,
            "messages": [{"role": "user", "content": "Count to a thousand."}],
            "max_tokens": MAX_TOKENS,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
        }
    ).encode()
    sock.sendall(request_head(CHAT, url.removeprefix("http://"), len(body)) + body)
    seen = b""
    while b"data: " not in seen:
        chunk = sock.recv(1024)
        assert chunk, seen
        seen += chunk
    assert seen.startswith(b"HTTP/1.1 200"), seen[:300]
    return sock


def _idle(mesh: SlowMesh) -> bool:
    return mesh.slots_held() == 0 and engine_running(mesh.engine_url) == 0


def test_a_stopped_reader_loses_its_slot_and_its_generation_stops(slow_mesh: SlowMesh) -> None:
    wait_until(lambda: _idle(slow_mesh), 30, what="an idle mesh before the test")
    sock = _open_stream(slow_mesh.gateway.url)
    stopped = time.monotonic()
    try:
        wait_until(lambda: engine_running(slow_mesh.engine_url) >= 1, 10, what="the generation to run")
        wait_until(lambda: _idle(slow_mesh), 40, interval_s=0.1, what="slot and generation released")
        released = time.monotonic() - stopped
    finally:
        sock.close()  # type: ignore[attr-defined]
    record("stopped reader: slot released after s", "gateway", released, f"send deadline {SEND_TIMEOUT_S:g} s")
    # Released by the deadline, not by the end of the generation (over a minute away).
    assert released < SEND_TIMEOUT_S + 20, released
    # The one slot serves the next client at once.
    r = httpx.post(
        slow_mesh.gateway.url + CHAT,
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        timeout=30,
    )
    assert r.status_code == 200, r.text


def test_a_dropped_slow_reader_releases_its_slot(slow_mesh: SlowMesh) -> None:
    wait_until(lambda: _idle(slow_mesh), 30, what="an idle mesh before the test")
    sock = _open_stream(slow_mesh.gateway.url)
    wait_until(lambda: slow_mesh.slots_held() == 1, 10, what="the slot to be held")
    dropped = time.monotonic()
    sock.close()  # type: ignore[attr-defined]
    wait_until(lambda: _idle(slow_mesh), 10, interval_s=0.05, what="slot and generation released")
    released = time.monotonic() - dropped
    record("dropped reader: slot released after s", "gateway", released)
    assert released < SEND_TIMEOUT_S
