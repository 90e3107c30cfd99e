"""A transcription's upload goes upstream as it arrives once admitted (issue 55 item 3), against a real
gateway on a real Redis in front of the fake upstream (it hashes what it receives as it arrives: the
test needs the upstream's own view of the bytes, and holds none of them): the gateway's peak RSS grows
less than ``STREAMED_BOUND`` for a 20 MiB upload (it would grow by the upload at least if it read the
body whole), the upstream gets the body byte for byte, whether the form's ``model`` comes before its
file (admitted, then streamed) or after it (spooled to a temporary file, then admitted and streamed);
past the audio limit the client gets 413 and the upstream request is cut off. An upload whose first
upstream refuses the connection (nothing of it sent) is replayed on the next one; one whose upstream
drops the connection mid-upload is a 502 with Retry-After at once (a scripted socket upstream, ``Cutter``:
the fake cannot drop a connection part-way).

This gateway serves several transcription models, so the queue a form takes is its ``model`` field's."""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from support.admission import BOUNDARY, MIB, TRANSCRIPTIONS, abuse, head, new_key
from support.gateway_helpers import ADMIN_KEY, Fake, RedisServer, launch_gateway_for, model_config
from support.hostile import connect, read_status
from support.polling import wait_until
from support.servers import Server

STREAMED_BOUND = 8 * MIB  # the gateway's peak RSS growth while a 20 MiB upload passes through it
AUDIO = bytes(range(256)) * (20 * MIB // 256)  # 20 MiB of audio-sized upload (the fake reads no audio)


CUT_SENT = 2 * MIB  # what the client sends of the upload the Cutter drops (it declares more)


class Cutter(threading.Thread):
    """An upstream on a raw socket: it answers anything but a transcription with ``{}``, and drops a
    transcription's connection (RST) once ``CUT_SENT`` less 64 KiB of its body have come."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.cut = 0

    def stop(self) -> None:
        """Stop listening: a connection is refused from now (shutdown wakes the thread in ``accept``)."""
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                if not (piece := conn.recv(65536)):
                    return
                data += piece
            if TRANSCRIPTIONS.encode() not in data.split(b"\r\n", 1)[0]:
                ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                conn.sendall(ok + b"Connection: close\r\n\r\n{}")
                return
            while len(data) < CUT_SENT - 64 * 1024 and (piece := conn.recv(65536)):
                data += piece
            self.cut += 1
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close: RST


@pytest.fixture(scope="module")
def cutter() -> Iterator[Cutter]:
    c = Cutter()
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def door() -> Iterator[Cutter]:
    """stt-replay's first upstream: healthy until the test closes its listening socket."""
    c = Cutter()
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory,
    redis_server: RedisServer,
    fake_upstream: Server,
    cutter: Cutter,
    door: Cutter,
) -> Iterator[Server]:
    log_dir = tmp_path_factory.mktemp("upload-relay")
    stt = {**model_config(fake_upstream.url, max_concurrency=2), "kind": "transcription"}
    models = {"chat": model_config(fake_upstream.url, max_concurrency=4), "stt": stt, "stt-2": stt}
    replay = [{"url": door.url, "max_concurrency": 1}, {"url": fake_upstream.url, "max_concurrency": 1}]
    models["stt-replay"] = {**model_config(fake_upstream.url, upstreams=replay), "kind": "transcription"}
    models["stt-cut"] = {**model_config(cutter.url), "kind": "transcription"}
    server = launch_gateway_for(log_dir, models, redis_server.url, "--auth", "on")
    yield server
    server.stop()


def _field(name: str, value: str) -> bytes:
    return f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()


def _file_head() -> bytes:
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n"
    ).encode()


def _pieces(*parts: bytes, size: int = 256 * 1024) -> Iterator[bytes]:
    """The body in pieces (sent chunked: the gateway counts it as it comes)."""
    for part in parts:
        for i in range(0, len(part), size):
            yield part[i : i + size]


def _post(gateway: Server, key: str, body: Iterator[bytes]) -> httpx.Response:
    return httpx.post(
        gateway.url + TRANSCRIPTIONS,
        content=body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
        timeout=60,
    )


@pytest.mark.parametrize("order", ["model first", "file first"])
def test_an_admitted_upload_is_relayed_byte_for_byte_holding_one_piece(gateway: Server, fake: Fake, order: str) -> None:
    """20 MiB through the gateway: the upstream's digest is the body's, the gateway's peak RSS grows
    less than ``STREAMED_BOUND`` (model first: streamed as it comes; file first: spooled to a
    temporary file by a thread, then streamed from it), another tenant's chat served meanwhile."""
    key = new_key(gateway)
    end = f"\r\n--{BOUNDARY}--\r\n".encode()
    if order == "model first":
        parts = (_field("model", "stt-2"), _file_head(), AUDIO, end)
    else:
        parts = (_file_head(), AUDIO, b"\r\n" + _field("model", "stt-2")[:-2], end)
    sent = b"".join(parts)
    with abuse(gateway, f"a 20 MiB upload, {order}", STREAMED_BOUND):
        r = _post(gateway, key, _pieces(*parts))
    assert r.status_code == 200, r.text
    assert r.json() == {"text": f"{len(sent)} bytes", "sha256": hashlib.sha256(sent).hexdigest()}
    assert r.headers["x-upstream"], r.headers


def test_an_upload_past_the_audio_limit_is_a_413_and_its_upstream_request_cut_off(gateway: Server, fake: Fake) -> None:
    """A chunked upload (no Content-Length to refuse it by) whose file passes --audio-max-bytes (25 MB):
    413 naming ``file`` once that many bytes have come, and the upstream request, begun as the form's
    model came first, is cut off (the fake counts it aborted, never answered)."""
    key = new_key(gateway)
    audio = b"\0" * (25_000_000 + 300_000)
    r = _post(gateway, key, _pieces(_field("model", "stt"), _file_head(), audio, f"\r\n--{BOUNDARY}--\r\n".encode()))
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert error["param"] == "file", error
    assert error["code"] == "file_too_large", error
    wait_until(lambda: fake.stats()["aborted"] == 1, 5, what="the upstream request cut off")
    assert fake.stats()["completed"] == 0


def test_a_form_naming_a_model_not_served_is_refused_before_its_file(gateway: Server, fake: Fake) -> None:
    """The model field comes first and names no transcription model: 404 (a chat model: 400), before
    the file is read, and nothing goes upstream (the body is small: a client sending on would see its
    connection closed)."""
    key = new_key(gateway)
    for model, status in (("nope", 404), ("chat", 400)):
        r = _post(gateway, key, _pieces(_field("model", model), _file_head(), b"\0" * 1000))
        assert r.status_code == status, r.text
        assert r.json()["error"]["param"] == "model"
    assert fake.stats()["total"] == 0


def test_an_upload_none_of_which_was_sent_is_replayed_on_another_upstream(
    gateway: Server, fake: Fake, door: Cutter
) -> None:
    """stt-replay's first upstream (the one an idle model picks first) has just stopped listening (its
    circuit is still closed: that takes three failed probes, 0.5 s apart): its connection is refused,
    and the upload, none of it sent yet, goes to the second whole (the fake's digest is the body's),
    counted as a retry."""
    key = new_key(gateway)
    door.stop()
    parts = (_field("model", "stt-replay"), _file_head(), AUDIO[: 2 * MIB], f"\r\n--{BOUNDARY}--\r\n".encode())
    sent = b"".join(parts)
    r = _post(gateway, key, _pieces(*parts))
    assert r.status_code == 200, r.text
    assert r.json()["sha256"] == hashlib.sha256(sent).hexdigest()
    metrics = httpx.get(gateway.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10).text
    retries = [line for line in metrics.splitlines() if line.startswith("genmesh_gateway_upstream_retries_total")]
    assert any('model="stt-replay"' in line and not line.endswith(" 0.0") for line in retries), retries


def test_an_upstream_lost_mid_upload_is_a_502_with_retry_after_at_once(gateway: Server, cutter: Cutter) -> None:
    """The client has sent 2 MiB of a 4 MiB upload when its upstream drops the connection: it gets a 502
    with Retry-After within seconds (not a hang, not a replay of bytes it no longer has), and the
    connection is closed."""
    key = new_key(gateway)
    form = _field("model", "stt-cut") + _file_head()
    with connect(gateway.url) as sock:
        sock.sendall(head(TRANSCRIPTIONS, len(form) + 4 * MIB + 100, key) + form + AUDIO[: CUT_SENT - len(form)])
        started = time.monotonic()
        status, data = read_status(sock)
        took = time.monotonic() - started
        sock.settimeout(3)
        assert sock.recv(65536) == b""  # closed, nothing after the answer
    assert status == 502, data
    answer_head, _, answer = data.partition(b"\r\n\r\n")
    assert b"\r\nretry-after: " in answer_head.lower(), answer_head
    assert json.loads(answer)["error"]["type"] == "upstream_error", answer
    assert took < 10
    assert cutter.cut >= 1
