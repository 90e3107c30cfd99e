"""Admission-before-bytes helpers for the gateway and hostile suites (issue 55): raw upload heads
and forms, an abuse window that bounds the gateway's peak RSS while another tenant's chat requests
must all be served, and an answer read up to the server's close."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from support.alongside import requests_alongside
from support.gateway_helpers import ADMIN_KEY, Fake, KeySpace, upstream_name
from support.hostile import connect, memory_status, read_status, record
from support.servers import Server

MIB = 1024 * 1024
UPLOAD = 20 * MIB  # each abusive upload's declared size (the gateway's transcription limit is 25 MB)
RSS_GROWTH_BOUND = 24 * MIB  # the gateway's peak RSS over its size before an abuse
TRANSCRIPTIONS = "/v1/audio/transcriptions"
CHAT = "/v1/chat/completions"
BOUNDARY = "genmeshboundary"


def new_key(gateway: Server, **limits: Any) -> str:
    r = httpx.post(
        gateway.url + "/admin/keys",
        json={"tenant": limits.pop("tenant", "abuser"), **limits},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=5,
    )
    assert r.status_code == 201, r.text
    secret: str = r.json()["api_key"]
    return secret


def head(
    path: str, length: int, key: str | None, content_type: str = f"multipart/form-data; boundary={BOUNDARY}"
) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: gateway", f"Content-Type: {content_type}", f"Content-Length: {length}"]
    if key is not None:
        lines.append(f"Authorization: Bearer {key}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def audio_form(audio: bytes) -> bytes:
    return (
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\nstt\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
            "Content-Type: audio/wav\r\n\r\n"
        ).encode()
        + audio
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )


@contextmanager
def abuse(gateway: Server, name: str = "admission abuse", bound: int = RSS_GROWTH_BOUND) -> Iterator[None]:
    """Run the block while another tenant sends chat requests one after another (each must be a 200),
    and bound the gateway's peak RSS growth during it by ``bound`` (the peak is reset first:
    /proc/PID/clear_refs)."""
    assert gateway.proc is not None
    pid = gateway.proc.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = memory_status(pid, "VmRSS")
    other = {"Authorization": f"Bearer {new_key(gateway, tenant='other')}"}
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with requests_alongside(gateway.url + CHAT, body, other, timeout_s=30):
        yield
    growth = memory_status(pid) - before
    record(f"{name}: gateway peak RSS growth MiB", "gateway", growth / MIB, f"< {bound / MIB:g}")
    assert growth < bound, f"the gateway's peak RSS grew {growth / MIB:.1f} MiB during {name}"


def answer_then_closed(sock: socket.socket) -> tuple[int, dict[str, Any], bytes]:
    """The answer, its JSON, and what came after it until the server closed (must close within 3 s)."""
    status, data = read_status(sock)
    body = json.loads(data.split(b"\r\n\r\n", 1)[1])
    after = b""
    sock.settimeout(3)
    started = time.monotonic()
    try:
        while time.monotonic() - started < 3:
            chunk = sock.recv(65536)
            if not chunk:
                return status, body, after
            after += chunk
    except ConnectionResetError:
        return status, body, after
    raise AssertionError(f"the connection stayed open after the {status}; then came {after[:200]!r}")


class Pusher(threading.Thread):
    """Sends an upload's head, then its body as fast as the gateway takes it, until stopped."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__(daemon=True)
        self.sock = connect(url)
        self.key = key
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        self.sock.sendall(head(TRANSCRIPTIONS, UPLOAD, self.key))
        self.sock.settimeout(0.2)
        piece = b"\0" * 65536
        while not self.stop.is_set() and self.sent < UPLOAD:
            try:
                self.sent += self.sock.send(piece[: UPLOAD - self.sent])
            except TimeoutError:
                continue
            except OSError:
                return


def queued(rc: Any) -> int:
    return int(rc.zcard(KeySpace().model("stt", []).queue))


def slots(rc: Any, fake: Fake) -> int:
    """Slot leases of the transcription model held now (its one upstream is the fake)."""
    key = KeySpace().model("stt", [upstream_name(fake.url)]).slots[0]
    return int(rc.zcount(key, int(time.time() * 1000), "+inf"))


def file_form(data: bytes) -> bytes:
    return (
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
            "Content-Type: application/jsonl\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
