"""A transcription's upload goes upstream as it arrives once admitted (issue 55 item 3), against a real
gateway on a real Redis in front of the fake upstream (it hashes what it receives as it arrives: the
test needs the upstream's own view of the bytes, and holds none of them): the gateway's peak RSS grows
less than ``STREAMED_BOUND`` for a 20 MiB upload (it would grow by the upload at least if it read the
body whole), the upstream gets the body byte for byte, whether the form's ``model`` comes before its
file (admitted, then streamed) or after it (spooled to a temporary file, then admitted and streamed);
past the audio limit the client gets 413 and the upstream request is cut off.

This gateway serves two transcription models, so the queue a form takes is its ``model`` field's."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import httpx
import pytest

from support.admission import BOUNDARY, MIB, TRANSCRIPTIONS, abuse, new_key
from support.gateway_helpers import Fake, RedisServer, launch_gateway, model_config
from support.polling import wait_until
from support.servers import Server

STREAMED_BOUND = 8 * MIB  # the gateway's peak RSS growth while a 20 MiB upload passes through it
AUDIO = bytes(range(256)) * (20 * MIB // 256)  # 20 MiB of audio-sized upload (the fake reads no audio)


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer, fake_upstream: Server
) -> Iterator[Server]:
    log_dir = tmp_path_factory.mktemp("upload-relay")
    stt = {**model_config(fake_upstream.url, max_concurrency=2), "kind": "transcription"}
    models = {"chat": model_config(fake_upstream.url, max_concurrency=4), "stt": stt, "stt-2": stt}
    config = log_dir / "gateway.json"
    config.write_text(json.dumps({"models": models}))
    server = launch_gateway(log_dir, config, redis_server.url, "--auth", "on")
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
