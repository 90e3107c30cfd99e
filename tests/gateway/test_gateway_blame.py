"""Only an upstream's own faults open its circuit (issue 55 item 4), against a real gateway on a
real Redis with two tiny upstreams of the test's own (threads with ``http.server``: the answers
under test are the point, so each upstream is scripted). A 4xx, or a 503 whose error says the
request is the cause (``queue_full``: a request that can never fit), is relayed, never replayed on
the other upstream and never counted: many of them open no circuit. A plain 503 (the upstream's
own trouble) is still replayed on the other upstream and counted."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from support.gateway_helpers import ADMIN_KEY
from support.polling import wait_until


class Scripted:
    """A tiny upstream: /health is 200; every other POST gets ``status`` and ``error`` (counted)."""

    def __init__(self) -> None:
        self.status = 503
        self.error: dict[str, Any] = {}
        self.hits = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer(200, b'{"status": "ok"}')

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                owner.hits += 1
                self._answer(owner.status, json.dumps({"error": owner.error}).encode())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, status: int, **error: Any) -> None:
        self.status = status
        self.error = {"message": "scripted", "type": "service_unavailable_error", **error}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstreams() -> Iterator[list[Scripted]]:
    ups = [Scripted(), Scripted()]
    yield ups
    for up in ups:
        up.stop()


def _opened(metrics: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("genmesh_gateway_circuit_transitions_total{") and 'to="open"' in line
    )


def test_request_caused_answers_are_relayed_once_and_open_no_circuit(
    start_gateway: Any, upstreams: list[Scripted]
) -> None:
    a, b = upstreams
    ups = [{"url": u.url, "max_concurrency": 4} for u in upstreams]
    gw = start_gateway({"m": {"upstreams": ups}}, "--circuit-failures", "2")
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    cases = [(503, {"code": "queue_full"}, "queue_full"), (400, {"type": "invalid_request_error"}, None)]
    for status, error, code in cases:
        for up in upstreams:
            up.answer(status, **error)
            up.hits = 0
        for _ in range(6):  # three times the circuit's threshold on each upstream
            r = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=10)
            assert r.status_code == status, r.text
            assert r.json()["error"].get("code") == code
            if status == 503:
                assert int(r.headers["retry-after"]) >= 1
        assert a.hits + b.hits == 6  # each answered once: never replayed on the other upstream
        assert _opened(httpx.get(gw.url + "/metrics", headers=admin).text) == 0
    # the upstream's own 503 is still its fault: replayed on the other, counted, and the circuits open
    for up in upstreams:
        up.answer(503)
        up.hits = 0
    r = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=10)
    assert r.status_code == 503
    assert a.hits == 1
    assert b.hits == 1
    for _ in range(4):
        httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=10)
    wait_until(lambda: _opened(httpx.get(gw.url + "/metrics", headers=admin).text) >= 1, 5, what="a circuit open")
