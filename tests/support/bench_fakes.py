"""Test doubles for the load generator: a character-level codec and a scripted OpenAI server (httpx transport)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import httpx


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
    """An async httpx transport answering every chat request with ``tokens`` chunks and usage, counting
    requests in flight (``max_in_flight``) and keeping the bodies it got."""

    def __init__(self, tokens: int = 3, usage: bool = True, status: int = 200) -> None:
        self.tokens, self.usage, self.status = tokens, usage, status
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[dict[str, Any]] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            for _ in range(3):  # let other requests start: they overlap as on a real server
                await asyncio.sleep(0)
            body = json.loads(request.content)
            self.bodies.append(body)
            if self.status != 200:
                return httpx.Response(self.status, json={"error": {"message": "no"}})
            usage = {"prompt_tokens": 7, "completion_tokens": self.tokens} if self.usage else None
            payload = sse(stream_chunks([f"t{i}" for i in range(self.tokens)], usage))
            return httpx.Response(200, content=payload, headers={"content-type": "text/event-stream"})
        finally:
            self.in_flight -= 1

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)
