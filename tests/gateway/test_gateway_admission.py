"""Admission before bytes (issue 55 item 3), against a real gateway on a real Redis with the fake
upstream: a refused request is answered and its connection closed without its body being read (and
nothing is written after the answer); the key's rate and concurrency limits refuse before the body;
a queued transcription holds none of its upload in the gateway; an admitted upload keeps its upload
time past the short deadline of one not yet admitted. Each abuse runs while another tenant sends
chat requests (0 errors) and bounds the gateway's peak RSS (``RSS_GROWTH_BOUND`` over its size
before the abuse: the uploads it refuses or queues would be tens of MiB each if it read them)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.admission import (
    BOUNDARY,
    CHAT,
    MIB,
    TRANSCRIPTIONS,
    UPLOAD,
    Pusher,
    abuse,
    answer_then_closed,
    audio_form,
    file_form,
    head,
    new_key,
    queued,
    slots,
)
from support.gateway_helpers import ADMIN_KEY, Fake, RedisServer, launch_gateway_for, model_config
from support.hostile import connect, read_status
from support.polling import wait_until
from support.servers import Server

UNADMITTED_S = 1.0  # --unadmitted-body-timeout-s of this module's gateway
KEY_QUOTA = 12 * MIB  # --files-key-max-bytes of this module's gateway


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer, fake_upstream: Server
) -> Iterator[Server]:
    log_dir = tmp_path_factory.mktemp("admission")
    models = {
        "chat": model_config(fake_upstream.url, max_concurrency=4),
        "stt": {
            **model_config(fake_upstream.url, max_concurrency=1, max_queue_length=32, max_queue_wait_s=4),
            "kind": "transcription",
        },
    }
    flags = ("--auth", "on", "--unadmitted-body-timeout-s", str(UNADMITTED_S))
    flags += ("--files-key-max-bytes", str(KEY_QUOTA), "--files-max-concurrent", "2")
    server = launch_gateway_for(log_dir, models, redis_server.url, *flags)
    yield server
    server.stop()


@pytest.mark.parametrize("path", [TRANSCRIPTIONS, "/v1/files"])
def test_an_unauthenticated_upload_is_refused_and_closed_unread(gateway: Server, fake: Fake, path: str) -> None:
    """No key or a wrong one on a 25 MB upload: a 401 at once, the connection closed without reading
    the body, nothing written after the 401 (no 408 when the body deadline would have passed)."""
    with abuse(gateway):
        for key in (None, "sk-not-a-key"):
            socks = [connect(gateway.url) for _ in range(16)]
            for sock in socks:
                sock.sendall(head(path, 25_000_000, key) + b"x" * 1000)
            for sock in socks:
                with sock:
                    status, body, after = answer_then_closed(sock)
                    assert status == 401, body
                    assert body["error"]["type"] == "authentication_error"
                    assert after == b"", after[:200]


def test_rate_and_concurrency_limits_refuse_before_the_body(
    gateway: Server, fake: Fake, redis_server: RedisServer
) -> None:
    rc = redis_server.client()
    rpm_key = new_key(gateway, rpm=1)
    if time.time() % 60 > 50:  # the RPM window is the clock's minute: not one that turns mid-test
        time.sleep(61 - time.time() % 60)
    r = httpx.post(
        gateway.url + CHAT,
        json={"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
        headers={"Authorization": f"Bearer {rpm_key}"},
    )
    assert r.status_code == 200, r.text
    one_key = new_key(gateway, max_concurrent=1)
    with abuse(gateway):
        # RPM: the second request's 4 MB body is never sent; its 429 comes at once, and the connection closes
        with connect(gateway.url) as sock:
            sock.sendall(head(CHAT, 4_000_000, rpm_key, "application/json"))
            status, body, after = answer_then_closed(sock)
        assert status == 429, body
        assert body["error"]["code"] == "rate_limit_exceeded_rpm"
        assert after == b""
        # concurrency: an upload admitted and sending its body slowly holds the key's one request
        with connect(gateway.url) as slow:
            slow.sendall(head(TRANSCRIPTIONS, 2 * MIB, one_key) + b"--")
            wait_until(lambda: slots(rc, fake) == 1, 5, what="the slow upload admitted")
            with connect(gateway.url) as sock:
                sock.sendall(head(TRANSCRIPTIONS, UPLOAD, one_key))
                status, body, after = answer_then_closed(sock)
            assert status == 429, body
            assert body["error"]["code"] == "rate_limit_exceeded_concurrency"
            assert after == b""
    wait_until(lambda: slots(rc, fake) == 0, 10, what="the slow upload's slot given back")


def test_queued_transcriptions_hold_none_of_their_uploads(
    gateway: Server, fake: Fake, redis_server: RedisServer
) -> None:
    """The model's one slot is held by an upload still coming in; eight more 20 MiB uploads queue
    behind it with their bodies unread (the client's bytes wait in its own socket buffers)."""
    key = new_key(gateway)
    rc = redis_server.client()
    with abuse(gateway):
        slow = connect(gateway.url)
        slow.sendall(head(TRANSCRIPTIONS, len(audio_form(b"\0" * 1000)), key) + audio_form(b"\0" * 1000)[:100])
        wait_until(lambda: slots(rc, fake) == 1, 5, what="the first upload admitted")
        pushers = [Pusher(gateway.url, key) for _ in range(8)]
        for p in pushers:
            p.start()
        wait_until(lambda: queued(rc) == 8, 10, what="eight uploads queued")
        time.sleep(0.5)  # let the pushers fill whatever the gateway would take
        assert all(p.sent < 4 * MIB for p in pushers), [p.sent for p in pushers]
        for p in pushers:
            p.stop.set()
            p.join(5)
            p.sock.close()
        slow.close()
    wait_until(lambda: queued(rc) == 0, 15, what="the queued uploads gone")


def test_an_admitted_upload_keeps_its_upload_time(gateway: Server, fake: Fake) -> None:
    """An upload admitted (key and limits checked) has --files-upload-timeout-s for its body, not the
    short --unadmitted-body-timeout-s: one sent over 2.5 s (> 1 s) is served."""
    key = new_key(gateway)
    form = audio_form(b"\0" * 3000)
    with connect(gateway.url) as sock:
        sock.sendall(head(TRANSCRIPTIONS, len(form), key))
        pieces = [form[i : i + 300] for i in range(0, len(form), 300)]
        for piece in pieces:
            time.sleep(2.5 / len(pieces))
            sock.sendall(piece)
        status, data = read_status(sock)
        while status == 200 and not data.endswith(b"0\r\n\r\n") and (more := sock.recv(65536)):
            data += more  # the reply is chunked: its last chunk may come apart from its head
    assert status == 200, data[:300]
    assert f'"text": "{len(form)} bytes"'.encode() in data, data[:300]


def test_a_file_upload_takes_its_slot_and_quota_before_its_bytes_and_streams_them(
    gateway: Server, fake: Fake, redis_server: RedisServer
) -> None:
    """/v1/files: past the key's quota (by the body's length) a 413 before a byte is sent; past
    --files-max-concurrent a 429 before a byte; a 10 MiB file is streamed to Redis (the gateway's
    peak RSS grows less than ``RSS_GROWTH_BOUND``) and counted at its own size, not its body's."""
    key = new_key(gateway)
    rc = redis_server.client()
    pad = "x" * 300  # lines of ~400 bytes: 10 MiB is 26,000 of them (--batch-max-lines: 50,000)
    line = (
        f'{{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {{"user": "{pad}"}}}}\n'.encode()
    )
    data = line * (10 * MIB // len(line))
    with abuse(gateway):
        with connect(gateway.url) as sock:
            sock.sendall(head("/v1/files", KEY_QUOTA + MIB, key))
            status, body, after = answer_then_closed(sock)
        assert status == 413, body
        assert body["error"]["code"] == "quota_exceeded"
        assert "files_key_max_bytes" in body["error"]["message"]
        assert after == b""
        # two uploads admitted and still sending hold the replica's two upload slots
        slow = [connect(gateway.url) for _ in range(2)]
        for sock in slow:
            sock.sendall(head("/v1/files", MIB, key) + b"--")

        def third() -> tuple[int, dict[str, Any], bytes]:
            with connect(gateway.url) as sock:
                sock.sendall(head("/v1/files", MIB, key))
                return answer_then_closed(sock)

        status, body, after = third()
        for _ in range(50):  # the slow two take their slots within a few ms of their heads
            if status == 429:
                break
            time.sleep(0.05)
            status, body, after = third()
        assert status == 429, body
        assert body["error"]["code"] == "too_many_concurrent_uploads"
        assert after == b""
        for sock in slow:
            sock.close()
        form = file_form(data)
        r = None
        for _ in range(50):  # the slow two give their slots back once the gateway sees them gone
            r = httpx.post(
                gateway.url + "/v1/files",
                content=form,
                headers={"Authorization": f"Bearer {key}", "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
                timeout=60,
            )
            if r.status_code != 429:
                break
            time.sleep(0.1)
        assert r is not None
        assert r.status_code == 200, r.text
    obj = r.json()
    assert obj["bytes"] == len(data)
    (ledger,) = list(rc.scan_iter(match="*:quota:files:bytes"))
    assert int(rc.hget(ledger, "#")) == len(data)  # counted at the file's size, not the body's
    content = httpx.get(gateway.url + f"/v1/files/{obj['id']}/content", headers={"Authorization": f"Bearer {key}"})
    assert content.content == data


def test_audio_is_metered_in_seconds_per_format_once_and_limited_per_minute(gateway: Server, fake: Fake) -> None:
    """Issue 55 item 5: a transcription is charged its audio seconds (the fake says 1.5 s) and no
    tokens, whatever its response format; ``requests`` counts it once; a key with ``aspm`` 2 is
    refused (429 + Retry-After, before its body) once its minute holds 2 s of audio."""
    if time.time() % 60 > 50:  # the window is the clock's minute: not one that turns mid-test
        time.sleep(61 - time.time() % 60)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    created = httpx.post(gateway.url + "/admin/keys", json={"tenant": "audio", "aspm": 2}, headers=admin).json()
    key, key_id = created["api_key"], created["key_id"]
    for fmt in ("json", "text"):
        form = audio_form(b"\0" * 2000).replace(
            b"stt\r\n",
            f'stt\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name="response_format"\r\n\r\n{fmt}\r\n'.encode(),
            1,
        )
        r = httpx.post(
            gateway.url + TRANSCRIPTIONS,
            content=form,
            headers={"Authorization": f"Bearer {key}", "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
    usage = httpx.get(gateway.url + f"/admin/keys/{key_id}/usage", headers=admin).json()
    assert usage["requests"] == 2
    assert usage["audio_milliseconds"] == 3000
    assert usage["prompt_tokens"] == 0
    assert usage["completion_tokens"] == 0
    with connect(gateway.url) as sock:
        sock.sendall(head(TRANSCRIPTIONS, UPLOAD, key))
        status, body, after = answer_then_closed(sock)
    assert status == 429, body
    assert body["error"]["code"] == "rate_limit_exceeded_aspm"
    assert after == b""
