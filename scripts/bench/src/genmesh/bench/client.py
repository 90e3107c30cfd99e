"""One OpenAI-compatible request, timed as vLLM's benchmark times it.

A streaming request records the time to the first chunk carrying generated text (TTFT), the gap
before every later such chunk (ITL), the end-to-end time, and the prompt and completion tokens
from the final ``usage`` chunk (``stream_options.include_usage``): tokens are always counted
from ``usage``, so every engine is measured by its own count of the same work. A request whose
stream ends without ``usage`` fails. Non-streaming requests take ``usage`` from the body.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from httpx_sse import aconnect_sse

from .datasets import RequestSpec

Api = Literal["chat", "completions"]
REQUEST_TIMEOUT = httpx.Timeout(600.0, connect=10.0)


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


async def _stream(client: httpx.AsyncClient, endpoint: Endpoint, body: dict[str, Any], out: RequestOutput) -> None:
    start = last = time.perf_counter()
    usage_seen = False
    async with aconnect_sse(client, "POST", endpoint.path, json=body) as source:
        if source.response.status_code != 200:
            await source.response.aread()
            raise RuntimeError(f"HTTP {source.response.status_code}: {source.response.text[:300]}")
        async for event in source.aiter_sse():
            if event.data == "[DONE]":
                break
            chunk = json.loads(event.data)
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


async def _unary(client: httpx.AsyncClient, endpoint: Endpoint, body: dict[str, Any], out: RequestOutput) -> None:
    start = time.perf_counter()
    resp = await client.post(endpoint.path, json=body)
    out.e2e_s = out.ttft_s = time.perf_counter() - start
    if resp.status_code != 200:
        raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:300]}")
    data = resp.json()
    if "usage" not in data:
        raise RuntimeError("the response carried no usage")
    _apply_usage(out, data["usage"])


async def send(client: httpx.AsyncClient, endpoint: Endpoint, req: RequestSpec, start_s: float = 0.0) -> RequestOutput:
    """Send one request; never raises for a failed request (``success`` False, ``error`` says why)."""
    out = RequestOutput(start_s=start_s)
    t0 = time.perf_counter()
    try:
        body = endpoint.body(req)
        await (_stream if endpoint.stream else _unary)(client, endpoint, body, out)
        out.success = True
    except (httpx.HTTPError, RuntimeError, ValueError, KeyError, TypeError) as exc:
        out.e2e_s = time.perf_counter() - t0
        out.error = f"{type(exc).__name__}: {exc}"
    return out


async def served_model(base_url: str, prefix: str = "/v1") -> str:
    """The first model id the server lists at ``/v1/models``."""
    async with httpx.AsyncClient(base_url=base_url, timeout=10.0) as client:
        resp = await client.get(f"{prefix}/models")
        resp.raise_for_status()
        return str(resp.json()["data"][0]["id"])
