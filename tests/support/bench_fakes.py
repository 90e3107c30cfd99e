"""Test doubles for the load generator: a character-level codec and a scripted OpenAI server on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer


class CharCodec:
    """One token per character: ``encode`` is code points, ``decode`` their characters."""

    vocab_size = 1000

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in ids)


def sse(chunks: Sequence[dict[str, Any] | str]) -> bytes:
    return b"".join(
        b"data: " + (c.encode() if isinstance(c, str) else json.dumps(c).encode()) + b"\n\n" for c in chunks
    )


def stream_chunks(texts: Sequence[str], usage: dict[str, int] | None) -> list[dict[str, Any] | str]:
    out: list[dict[str, Any] | str] = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    out += [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in texts]
    if usage is not None:
        out.append({"choices": [], "usage": usage})
    out.append("[DONE]")
    return out


class ScriptedServer:
    """A real HTTP server on loopback (aiohttp) answering every chat request with ``tokens`` streamed
    chunks and usage, counting requests in flight (``max_in_flight``) and keeping the bodies it got.
    Use as ``async with ScriptedServer(...) as server`` and send to ``server.url``."""

    def __init__(self, tokens: int = 3, usage: bool = True, status: int = 200) -> None:
        self.tokens, self.usage, self.status = tokens, usage, status
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[dict[str, Any]] = []
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        app.router.add_get("/health", self.health)
        self._server = TestServer(app, host="127.0.0.1")

    @property
    def url(self) -> str:
        return str(self._server.make_url("")).rstrip("/")

    async def __aenter__(self) -> ScriptedServer:
        await self._server.start_server()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._server.close()

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            body = await request.json()
            self.bodies.append(body)
            if self.status != 200:
                return web.json_response({"error": {"message": "no"}}, status=self.status)
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            usage = {"prompt_tokens": 7, "completion_tokens": self.tokens} if self.usage else None
            for chunk in stream_chunks([f"t{i}" for i in range(self.tokens)], usage):
                await response.write(sse([chunk]))
                await asyncio.sleep(0.005)  # chunks apart in time, and requests overlap as on a real server
            await response.write_eof()
            return response
        finally:
            self.in_flight -= 1
