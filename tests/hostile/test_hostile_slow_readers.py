"""Clients that stop reading a stream, on the real gateway in front of the real microservice and
engine: the send deadline cuts them off, their generation stops (the engine's running gauge drops)
and their gateway slot is free again; a client that drops its connection frees it at once; and a
route's request timeout bounds a stalled reply too, however long the send deadline."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from genmesh.gateway.redis.keys import KeySpace
from support.gateway_helpers import launch_gateway
from support.hostile import CHAT, connect, record, request_head, route_to, start_microservice
from support.polling import wait_until
from support.servers import MODEL_NAME, Server, engine_running

SEND_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_S = 10.0  # the timed gateway's route; its send deadline (30 s) is far longer
MAX_TOKENS = 3000  # about a minute of generation on this machine: far longer than the deadline


@dataclass
class SlowMesh:
    engine_url: str
    microservice: Server
    gateway: Server
    redis: object
    timed_gateway: Server | None = None  # the route has REQUEST_TIMEOUT_S, the send deadline is long

    def slots_held(self, prefix: str | None = None) -> int:
        upstream = self.microservice.url.removeprefix("http://")
        keys = KeySpace(prefix) if prefix is not None else KeySpace()
        key = keys.model(MODEL_NAME, [upstream]).slots[0]
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
            timed = logs / "timed-gateway.yaml"
            timed.write_text(
                json.dumps(route_to(microservice.url, 1, max_queue_wait_s=60, request_timeout_s=REQUEST_TIMEOUT_S))
            )
            # small socket buffers: the stream stalls within seconds, well before the request timeout
            flags = ("--send-timeout-s", "30", "--send-buffer-bytes", "4096", "--redis-prefix", "timed")
            timed_gateway = launch_gateway(logs, timed, redis.url, *flags)
            try:
                yield SlowMesh(engine_url, microservice, gateway, redis, timed_gateway)
            finally:
                timed_gateway.stop()
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


def test_a_stalled_reader_is_cut_off_at_the_request_timeout(slow_mesh: SlowMesh) -> None:
    gateway = slow_mesh.timed_gateway
    assert gateway is not None
    wait_until(lambda: _idle(slow_mesh), 30, what="an idle mesh before the test")
    sent = time.monotonic()
    sock = _open_stream(gateway.url)
    try:
        wait_until(lambda: slow_mesh.slots_held(prefix="timed") == 1, 10, what="the slot to be held")
        wait_until(
            lambda: slow_mesh.slots_held(prefix="timed") == 0,
            REQUEST_TIMEOUT_S + 5,
            interval_s=0.05,
            what="the slot released",
        )
        released = time.monotonic() - sent
        # the reply was cut off because the client took nothing (not ended by the relay's own deadline)
        assert "reply not taken within the request timeout" in gateway.log_tail(200), gateway.log_tail()
        sock.settimeout(10)  # the connection is closed (reset): what was buffered, then nothing more
        with contextlib.suppress(ConnectionResetError):
            while sock.recv(65536):  # type: ignore[attr-defined]
                pass
        wait_until(lambda: engine_running(slow_mesh.engine_url) == 0, 10, what="the generation to stop")
    finally:
        sock.close()  # type: ignore[attr-defined]
    record("stalled reader: slot released after s", "gateway", released, f"request timeout {REQUEST_TIMEOUT_S:g} s")
    assert released <= REQUEST_TIMEOUT_S + 1, released
    r = httpx.post(
        gateway.url + CHAT,
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        timeout=30,
    )
    assert r.status_code == 200, r.text
