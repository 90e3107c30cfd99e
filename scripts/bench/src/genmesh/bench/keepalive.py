"""A minimal HTTP/1.1 keep-alive load client, for measuring servers faster than httpx can drive.

The general load generator (``client.py``, httpx) costs more CPU per request than a gateway
in front of a no-delay upstream; on 2 cores it, not the gateway, set the pace (about 120
requests/s with one request at a time reaching the upstream). This client writes a fixed
request on each of ``clients`` raw connections and reads just enough of each response
(status, headers, body by length or chunks) to send the next.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field


@dataclass
class KeepAliveResult:
    latencies_s: list[float] = field(default_factory=list)
    errors: list[int] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def requests_per_s(self) -> float:
        return len(self.latencies_s) / self.elapsed_s if self.elapsed_s else 0.0


def chat_request(host: str, model: str) -> bytes:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


async def _read_response(reader: asyncio.StreamReader) -> int:
    status = int((await reader.readline()).split()[1])
    chunked, length = False, 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        key, _, value = line.decode("latin-1").partition(":")
        if key.lower() == "transfer-encoding" and "chunked" in value:
            chunked = True
        elif key.lower() == "content-length":
            length = int(value)
    if not chunked:
        await reader.readexactly(length)
        return status
    while True:
        size = int((await reader.readline()).strip(), 16)
        await reader.readexactly(size + 2)
        if size == 0:
            return status


async def _connection(host: str, port: int, request: bytes, todo: list[int], out: KeepAliveResult) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while todo:
            todo.pop()
            t0 = time.perf_counter()
            writer.write(request)
            status = await _read_response(reader)
            out.latencies_s.append(time.perf_counter() - t0)
            if status != 200:
                out.errors.append(status)
    finally:
        writer.close()


async def run(host: str, port: int, model: str, clients: int, requests: int) -> KeepAliveResult:
    """Send ``requests`` unary chat requests over ``clients`` keep-alive connections."""
    out = KeepAliveResult()
    todo = list(range(requests))
    request = chat_request(host, model)
    t0 = time.monotonic()
    await asyncio.gather(*(_connection(host, port, request, todo, out) for _ in range(clients)))
    out.elapsed_s = time.monotonic() - t0
    return out
