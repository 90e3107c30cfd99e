"""One OpenAI-compatible request, timed as vLLM's benchmark times it.

A streaming request records the time to the first chunk carrying generated text (TTFT), the gap
before every later such chunk (ITL), the end-to-end time, and the prompt and completion tokens
from the final ``usage`` chunk (``stream_options.include_usage``): tokens are always counted
from ``usage``, so every engine is measured by its own count of the same work. A request whose
stream ends without ``usage`` fails. Non-streaming requests take ``usage`` from the body.

The client is aiohttp, as in vLLM's ``benchmark_serving``: the load generator shares this 2-core
machine with the server it measures, and its CPU is taken from the server. Measured while 32
streams ran against the engine, httpx with httpx-sse cost the client 2.9 s of CPU for 4,096
chunks (0.7 ms each, 10 % of the machine); aiohttp with its C parser 0.96 s. The body is read
line by line: every OpenAI-compatible server we measure (ours, vLLM, llama-server) sends each
event as one ``data:`` line, and comment or ``event:`` lines are skipped.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import httpx

from .datasets import RequestSpec

Api = Literal["chat", "completions"]
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=600.0, connect=10.0)


@dataclass(frozen=True)
class Endpoint:
    """Where and how requests go: ``{base_url}{prefix}/chat/completions`` or ``.../completions``."""

    base_url: str
    model: str | None = None
    api: Api = "chat"
    prefix: str = "/v1"
    stream: bool = True
    ignore_eos: bool = True
    temperature: float = 0.0
    extra_body: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return f"{self.prefix}/chat/completions" if self.api == "chat" else f"{self.prefix}/completions"

    def body(self, req: RequestSpec) -> dict[str, Any]:
        body: dict[str, Any] = {"max_tokens": req.output_len, "temperature": self.temperature}
        if self.model is not None:
            body["model"] = self.model
        if self.api == "chat":
            messages = [{"role": "system", "content": req.system}] if req.system else []
            body["messages"] = [*messages, {"role": "user", "content": req.prompt}]
        else:
            body["prompt"] = f"{req.system}\n\n{req.prompt}" if req.system else req.prompt
        if self.ignore_eos:
            body["ignore_eos"] = True
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return {**body, **self.extra_body}


@dataclass
class RequestOutput:
    success: bool = False
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    e2e_s: float = 0.0
    start_s: float = 0.0  # when it was sent, seconds since the run started
    error: str | None = None

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: (e2e - TTFT) / (tokens - 1)."""
        if not self.success or self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


def _text_of(choice: dict[str, Any]) -> str:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return str(delta.get("content") or delta.get("reasoning_content") or "")
    return str(choice.get("text") or "")


def _apply_usage(out: RequestOutput, usage: Any) -> None:
    if isinstance(usage, dict) and "completion_tokens" in usage:
        out.output_tokens = int(usage["completion_tokens"])
        out.prompt_tokens = int(usage.get("prompt_tokens") or 0)


async def _events(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The data of each ``data:`` line of an event stream, until ``[DONE]`` or the end."""
    async for line in resp.content:
        if not line.startswith(b"data:"):
            continue  # blank separators, ``event:``/``id:`` fields, ``:`` comments
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield data


async def _stream(session: aiohttp.ClientSession, endpoint: Endpoint, body: dict[str, Any], out: RequestOutput) -> None:
    start = last = time.perf_counter()
    usage_seen = False
    async with session.post(endpoint.path, json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:300]}")
        async for data in _events(resp):
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError(f"stream error: {chunk['error']}")
            now = time.perf_counter()
            if any(_text_of(c) for c in chunk.get("choices") or ()):
                if out.ttft_s is None:
                    out.ttft_s = now - start
                else:
                    out.itl_s.append(now - last)
                last = now
            if chunk.get("usage"):
                _apply_usage(out, chunk["usage"])
                usage_seen = True
    out.e2e_s = time.perf_counter() - start
    if not usage_seen:
        raise RuntimeError("the stream carried no usage (stream_options.include_usage)")


async def _unary(session: aiohttp.ClientSession, endpoint: Endpoint, body: dict[str, Any], out: RequestOutput) -> None:
    start = time.perf_counter()
    async with session.post(endpoint.path, json=body) as resp:
        text = await resp.text()
    out.e2e_s = out.ttft_s = time.perf_counter() - start
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {text[:300]}")
    data = json.loads(text)
    if "usage" not in data:
        raise RuntimeError("the response carried no usage")
    _apply_usage(out, data["usage"])


def session(base_url: str, connections: int) -> aiohttp.ClientSession:
    """The load generator's session: ``connections`` keep-alive connections to ``base_url``."""
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=connections)
    return aiohttp.ClientSession(base_url=base_url, connector=connector, timeout=REQUEST_TIMEOUT)


async def send(
    session: aiohttp.ClientSession, endpoint: Endpoint, req: RequestSpec, start_s: float = 0.0
) -> RequestOutput:
    """Send one request; never raises for a failed request (``success`` False, ``error`` says why)."""
    out = RequestOutput(start_s=start_s)
    t0 = time.perf_counter()
    try:
        body = endpoint.body(req)
        await (_stream if endpoint.stream else _unary)(session, endpoint, body, out)
        out.success = True
    except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError, KeyError, TypeError) as exc:
        out.e2e_s = time.perf_counter() - t0
        out.error = f"{type(exc).__name__}: {exc}"
    return out


async def served_model(base_url: str, prefix: str = "/v1") -> str:
    """The first model id the server lists at ``/v1/models``."""
    async with httpx.AsyncClient(base_url=base_url, timeout=10.0) as client:
        resp = await client.get(f"{prefix}/models")
        resp.raise_for_status()
        return str(resp.json()["data"][0]["id"])
