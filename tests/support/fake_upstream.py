"""A test double: a tiny OpenAI-shaped upstream for the gateway tests and the gateway's queue benchmark
(``python tests/support/fake_upstream.py --port N``; it imports nothing of ours).

``max_tokens`` chunks are produced ``--delay-ms`` apart (SSE when ``stream``), usage is
``prompt_tokens=5, completion_tokens=max_tokens``. It counts requests in flight (and the most at
once), records the order in which requests started (their ``user`` field), counts clients that
went away before the end, and can hold every request at the start (``POST /control {"hold": true}``)
or answer every one with an error status (``{"fail_status": 503}``, no Retry-After; 0 clears it; ``fail_code``:
the error's code), serve ``/v1/audio/transcriptions`` (its text: the upload's size; ``sha256``: its digest),
and answer its health check with another status (``{"health_status": 503}``; it counts health checks).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
from collections.abc import Sequence
from typing import Any

import uvicorn
from starlette.types import Receive, Scope, Send

TRANSCRIPTIONS = "/v1/audio/transcriptions"


class FakeUpstream:
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail_status = 0
        self.fail_code = ""  # the error code of a failure's body (e.g. queue_full)
        self.health_status = 200
        self.health_checks = 0
        self.reset()

    def reset(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0
        self.total = 0
        self.completed = 0
        self.aborted = 0
        self.order: list[str] = []

    def stats(self) -> dict[str, Any]:
        return {
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "total": self.total,
            "completed": self.completed,
            "aborted": self.aborted,
            "order": self.order,
            "held": not self.gate.is_set(),
            "health_checks": self.health_checks,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        path = scope["path"]
        if path == TRANSCRIPTIONS and not self.fail_status:
            hashed = await _hashed(receive)
            if hashed is None:  # the upload was cut off on its way
                self.aborted += 1
            else:
                await self._transcribe(*hashed, receive, send)
            return
        pieces = []
        while True:
            msg = await receive()
            pieces.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        body = b"".join(pieces)
        if path in ("/health", "/v1/health_check"):
            self.health_checks += 1
            await _json(send, self.health_status, {"status": "ok" if self.health_status == 200 else "down"})
        elif path == "/stats":
            await _json(send, 200, self.stats())
        elif path == "/control":
            ctl = json.loads(body or b"{}")
            if ctl.get("reset"):
                self.reset()
            if "hold" in ctl:
                self.gate.clear() if ctl["hold"] else self.gate.set()
            if "delay_ms" in ctl:
                self.delay_s = float(ctl["delay_ms"]) / 1000
            if "fail_status" in ctl:
                self.fail_status = int(ctl["fail_status"])
            if "fail_code" in ctl:
                self.fail_code = str(ctl["fail_code"])
            if "health_status" in ctl:
                self.health_status = int(ctl["health_status"])
            await _json(send, 200, self.stats())
        elif path in ("/v1/chat/completions", "/v1/completions", TRANSCRIPTIONS) and self.fail_status:
            self.total += 1
            error = {"message": "the fake upstream fails on request", "type": "service_unavailable_error"}
            if self.fail_code:
                error["code"] = self.fail_code
            await _json(send, self.fail_status, {"error": error})
        elif path in ("/v1/chat/completions", "/v1/completions"):
            await self._generate(json.loads(body), path, receive, send)
        else:
            await _json(send, 404, {"error": {"message": "not found", "type": "not_found_error"}})

    async def _transcribe(self, size: int, digest: str, receive: Receive, send: Send) -> None:
        """A transcription: held like a completion; its text says how many bytes the upload had (and
        ``sha256`` their digest; the upload is hashed as it arrives, never held)."""
        self.in_flight += 1
        self.total += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            if not self.gate.is_set():
                await asyncio.wait({asyncio.ensure_future(self.gate.wait()), gone}, return_when=asyncio.FIRST_COMPLETED)
            if gone.done():
                self.aborted += 1
                return
            data = json.dumps({"text": f"{size} bytes", "sha256": digest}).encode()
            headers = [(b"content-type", b"application/json"), (b"x-genmesh-audio-seconds", b"1.5")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": data})
            self.completed += 1
        finally:
            gone.cancel()
            self.in_flight -= 1

    async def _generate(self, req: dict[str, Any], path: str, receive: Receive, send: Send) -> None:
        self.in_flight += 1
        self.total += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.order.append(str(req.get("user", "")))
        n = int(req.get("max_tokens") or 4)
        finished = False
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            if not self.gate.is_set():
                await asyncio.wait({asyncio.ensure_future(self.gate.wait()), gone}, return_when=asyncio.FIRST_COMPLETED)
            chat = path.endswith("chat/completions")
            if req.get("stream"):
                await send(
                    {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
                )
                for i in range(n):
                    if gone.done():
                        return
                    if self.delay_s:
                        await asyncio.sleep(self.delay_s)
                    delta = {"delta": {"content": f"t{i} "}} if chat else {"text": f"t{i} "}
                    chunk = {
                        "object": "chunk",
                        "choices": [{"index": 0, **delta, "finish_reason": None}],
                        "usage": None,
                    }
                    await send(
                        {
                            "type": "http.response.body",
                            "body": b"data: " + json.dumps(chunk).encode() + b"\n\n",
                            "more_body": True,
                        }
                    )
                opts = req.get("stream_options") or {}
                tail = b""
                if opts.get("include_usage"):
                    usage: dict[str, Any] = {
                        "choices": [],
                        "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5},
                    }
                    tail = b"data: " + json.dumps(usage).encode() + b"\n\n"
                await send({"type": "http.response.body", "body": tail + b"data: [DONE]\n\n"})
            else:
                if self.delay_s:
                    await asyncio.sleep(self.delay_s * n)
                if gone.done():
                    return
                text = "".join(f"t{i} " for i in range(n))
                choice: dict[str, Any] = (
                    {"index": 0, "message": {"role": "assistant", "content": text}}
                    if chat
                    else {"index": 0, "text": text}
                )
                usage = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5}
                await _json(send, 200, {"id": "fake", "object": "x", "choices": [choice], "usage": usage})
            finished = True
        finally:
            gone.cancel()
            self.in_flight -= 1
            if finished:
                self.completed += 1
            else:
                self.aborted += 1


async def _hashed(receive: Receive) -> tuple[int, str] | None:
    """A request body's size and sha256, read as it arrives; None if it is cut off."""
    digest, size = hashlib.sha256(), 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return None
        piece = msg.get("body", b"")
        digest.update(piece)
        size += len(piece)
        if not msg.get("more_body"):
            return size, digest.hexdigest()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _json(send: Send, status: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": data})


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python tests/support/fake_upstream.py")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--delay-ms", type=float, default=0.0, help="time per generated chunk")
    ns = p.parse_args(argv)
    uvicorn.run(FakeUpstream(ns.delay_ms / 1000), host="127.0.0.1", port=ns.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
