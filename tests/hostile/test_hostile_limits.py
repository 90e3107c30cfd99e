"""The HTTP limits at every hop, with their defaults: slow clients are cut off within 10 s, a body
past the limit is a 413 before it is read whole, oversized headers a 431, too many connections a
fast 503 with Retry-After; and the gateway's admin surfaces need their keys."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from support.gateway_helpers import ADMIN_KEY
from support.hostile import CHAT, Hop, closed_within, connect, drip, read_status, record, request_head
from support.polling import wait_until
from support.servers import Server

HOPS = ("engine", "microservice", "gateway")
SLOWLORIS_LIMIT_S = 10.0
MIB = 1024 * 1024


def _hops(hostile: object) -> list[Hop]:
    return hostile.hops()  # type: ignore[attr-defined,no-any-return]


def _host(url: str) -> str:
    return url.removeprefix("http://")


def _slow_headers(hop: Hop) -> float:
    sock = connect(hop.url)
    with sock:
        sock.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: {_host(hop.url)}\r\n".encode())
        return drip(sock, b"X-Slow: " + b"a" * 100, every_s=1.0, until_s=SLOWLORIS_LIMIT_S + 5)


def _slow_body(hop: Hop) -> float:
    sock = connect(hop.url)
    with sock:
        sock.sendall(request_head(CHAT, _host(hop.url), 1000, hop.headers))
        return drip(sock, b"{" + b" " * 999, every_s=1.0, until_s=SLOWLORIS_LIMIT_S + 5)


def _idle(hop: Hop) -> float:
    sock = connect(hop.url)
    with sock:
        return closed_within(sock, SLOWLORIS_LIMIT_S + 5)


def test_slowloris_is_closed_within_10_s(hostile: object) -> None:
    jobs = [(kind, hop) for hop in _hops(hostile) for kind in (_slow_headers, _slow_body, _idle)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda job: (job[0].__name__, job[1].name, job[0](job[1])), jobs))
    for kind, hop, seconds in results:
        record(f"slowloris{kind} closed after s", hop, seconds, f"< {SLOWLORIS_LIMIT_S:g}")
        assert seconds < SLOWLORIS_LIMIT_S, (kind, hop, seconds)


@pytest.mark.parametrize("hop_index", range(3), ids=HOPS)
def test_body_over_the_limit_is_413_before_it_is_read(hostile: object, hop_index: int) -> None:
    hop = _hops(hostile)[hop_index]
    # Content-Length of 40 MB: the answer comes before a byte of the body is sent.
    sock = connect(hop.url)
    with sock:
        sock.sendall(request_head(CHAT, _host(hop.url), 40 * MIB, hop.headers))
        status, data = read_status(sock)
    assert status == 413, data[:300]
    body = data.split(b"\r\n\r\n", 1)[1]
    assert json.loads(body)["error"]["code"] == "request_too_large"
    # Chunked, no length given: refused once the limit (4 MiB by default) has come in, not at 40 MB.
    sock = connect(hop.url)
    sent = 0
    with sock:
        sock.sendall(request_head(CHAT, _host(hop.url), None, hop.headers))
        chunk = b"%x\r\n" % MIB + b" " * MIB + b"\r\n"
        sock.settimeout(0.05)
        answer = b""
        while sent < 40 * MIB and not answer:
            try:
                sock.sendall(chunk)
                sent += MIB
                answer = sock.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.settimeout(10)
        while b"\r\n\r\n" not in answer:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert sent <= 8 * MIB, f"{hop.name} read {sent} bytes before refusing"
    record("chunked body refused after MiB", hop.name, sent / MIB, "4 MiB limit")


@pytest.mark.parametrize("hop_index", range(3), ids=HOPS)
def test_oversized_headers_are_431(hostile: object, hop_index: int) -> None:
    hop = _hops(hostile)[hop_index]
    big = {"X-Big": "a" * 40_000}
    many = {f"X-H{i}": "1" for i in range(300)}
    for headers in (big, many):
        r = httpx.post(hop.url + CHAT, json={"messages": []}, headers={**hop.headers, **headers}, timeout=10)
        assert r.status_code == 431, r.text
        assert r.json()["error"]["code"] == "headers_too_large"
        assert len(r.content) < 4096


def test_connections_past_the_cap_get_a_fast_503(capped_microservice: Server) -> None:
    url = capped_microservice.url  # --max-client-connections 4
    held = [connect(url) for _ in range(4)]
    try:
        started = time.monotonic()
        r = httpx.get(url + "/v1/health_check", timeout=5)
        elapsed = time.monotonic() - started
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "too_many_connections"
        assert elapsed < 1.0
    finally:
        for sock in held:
            sock.close()
    # the held connections gone, it serves again
    wait_until(lambda: httpx.get(url + "/v1/health_check", timeout=5).status_code == 200, 10, what="service again")


def test_gateway_admin_surfaces_need_keys(hostile: object) -> None:
    gateway = hostile.gateway.url  # type: ignore[attr-defined]
    key = {"Authorization": f"Bearer {hostile.key}"}  # type: ignore[attr-defined]
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    for path in ("/metrics", "/docs", "/openapi.json"):
        assert httpx.get(gateway + path, timeout=10).status_code == 401, path
    assert httpx.get(gateway + "/metrics", headers=key, timeout=10).status_code == 401
    assert httpx.get(gateway + "/metrics", headers=admin, timeout=10).status_code == 200
    for path in ("/docs", "/openapi.json"):
        assert httpx.get(gateway + path, headers=key, timeout=10).status_code == 200, path
    paths = httpx.get(gateway + "/openapi.json", headers=key, timeout=10).json()["paths"]
    assert "/v1/chat/completions" in paths  # the hot path is documented too
    assert httpx.get(gateway + "/health", timeout=10).status_code == 200  # liveness stays open
    # the admin endpoints check their input like every other: a lone surrogate is a 400, not a 500
    bad = b'{"tenant": "\\ud800"}'
    r = httpx.post(gateway + "/admin/keys", content=bad, headers={**admin, "content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "tenant"


def test_admin_key_is_refused_on_the_command_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "genmesh.gateway", "--admin-key", "s3cret"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "GENMESH_GATEWAY_ADMIN_KEY" in proc.stderr
