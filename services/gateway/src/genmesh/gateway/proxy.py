"""Relaying one request to an upstream: connect, time out, stream back without buffering, count usage.

Streams are relayed event by event (``data: ...`` blocks) as they arrive; the only change made to
them is that, when the gateway asked the upstream for a usage chunk the client did not ask for
(to account tokens), that chunk is dropped. Unary replies are relayed chunk by chunk too.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import orjson

from genmesh.protocol import OpenAIError

from .relay_client import UpstreamError, UpstreamResponse

_TOKEN = re.compile(rb'"(?:content|text|delta)":"(?!")')  # chat, completions, Responses
_EVENT_END = re.compile(rb"\r?\n\r?\n")
_USAGE = re.compile(rb'"usage":\s*\{')
_MAX_UNARY_SCAN = 4 * 1024 * 1024
_HOP_HEADERS = frozenset(
    (b"content-length", b"transfer-encoding", b"connection", b"keep-alive", b"x-request-id", b"date", b"server")
)


def upstream_timeout(what: str, seconds: float) -> OpenAIError:
    return OpenAIError(
        f"upstream {what} timeout after {seconds:g}s",
        status=504,
        type="timeout_error",
        code=f"{what.replace(' ', '_')}_timeout",
    )


def bad_gateway(message: str) -> OpenAIError:
    return OpenAIError(message, status=502, type="upstream_error", code="bad_gateway")


@dataclass
class Outcome:
    """What the relay learned: usage for accounting and whether it ended cleanly."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    first_token_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def prepare_body(raw: bytes, body: dict[str, Any], stream: bool) -> tuple[bytes, bool]:
    """The bytes to send upstream and whether a usage chunk was added that the client must not see."""
    if not stream:
        return raw, False
    opts = body.get("stream_options")
    if isinstance(opts, dict) and opts.get("include_usage"):
        return raw, False
    if opts is not None and not isinstance(opts, dict):
        return raw, False  # let the upstream name the bad value
    patched = dict(body)
    patched["stream_options"] = {**(opts or {}), "include_usage": True}
    try:
        return orjson.dumps(patched), True
    except TypeError:  # integers beyond 64 bits, which orjson refuses and json does not
        return json.dumps(patched, separators=(",", ":")).encode(), True


def response_headers(resp: UpstreamResponse) -> list[tuple[bytes, bytes]]:
    """The upstream's headers (names lower-case) less hop-by-hop ones and those the gateway sets."""
    return [(k, v) for k, v in resp.headers if k not in _HOP_HEADERS]


def _usage_from(obj: Any, out: Outcome) -> None:
    """Usage of a chat or completion reply (or chunk), or of a response (``/v1/responses``: the
    reply itself, or its final stream event)."""
    if isinstance(obj, dict) and isinstance(obj.get("response"), dict):
        obj = obj["response"]
    usage = obj.get("usage") if isinstance(obj, dict) else None
    if isinstance(usage, dict):
        out.prompt_tokens = int(usage.get("prompt_tokens") or usage.get("input_tokens") or 0)
        out.completion_tokens = int(usage.get("completion_tokens") or usage.get("output_tokens") or 0)


def _sse_error(err: OpenAIError) -> bytes:
    return b"data: " + orjson.dumps(err.body()) + b"\n\ndata: [DONE]\n\n"


async def relay_stream(
    resp: UpstreamResponse,
    out: Outcome,
    *,
    strip_usage: bool,
    first_token_deadline: float,
    total_deadline: float,
    first_token_timeout_s: float,
    total_timeout_s: float,
) -> AsyncGenerator[bytes, None]:
    """SSE relay, one event at a time; an upstream failure mid-stream ends with an error event and [DONE]."""
    buf = b""
    try:
        while True:
            waiting_first = out.first_token_at is None
            deadline = min(first_token_deadline, total_deadline) if waiting_first else total_deadline
            try:
                chunk = await resp.read(deadline)
            except TimeoutError:
                which = "first token" if waiting_first and first_token_deadline < total_deadline else "total"
                secs = first_token_timeout_s if which == "first token" else total_timeout_s
                out.error = f"{which} timeout"
                yield buf + _sse_error(upstream_timeout(which, secs))
                return
            if not chunk:
                break
            buf += chunk
            while True:
                end = _EVENT_END.search(buf)
                if end is None:
                    break
                event, buf = buf[: end.end()], buf[end.end() :]
                if out.first_token_at is None and (_TOKEN.search(event) or b"[DONE]" in event):
                    out.first_token_at = time.monotonic()
                if _USAGE.search(event):
                    payload = event.split(b"data:", 1)[-1].strip()
                    try:
                        obj = orjson.loads(payload)
                    except ValueError:
                        obj = None
                    _usage_from(obj, out)
                    if strip_usage and isinstance(obj, dict) and obj.get("choices") == []:
                        continue
                yield event
            if len(buf) > 1024 * 1024:  # not SSE framing we understand: pass it on as is
                yield buf
                buf = b""
        if buf:
            yield buf
    except UpstreamError as exc:
        out.error = type(exc).__name__
        yield buf + _sse_error(bad_gateway(f"upstream stream failed: {type(exc).__name__}"))


async def relay_unary(resp: UpstreamResponse, out: Outcome, *, total_deadline: float) -> AsyncGenerator[bytes, None]:
    seen: list[bytes] = []
    size = 0
    while True:
        try:
            chunk = await resp.read(total_deadline)
        except (TimeoutError, UpstreamError) as exc:
            out.error = type(exc).__name__
            return  # headers are sent: all we can do is end the body short
        if not chunk:
            break
        if size < _MAX_UNARY_SCAN:
            seen.append(chunk)
            size += len(chunk)
        yield chunk
    if b"json" in (resp.header(b"content-type") or b"") and size < _MAX_UNARY_SCAN:
        with contextlib.suppress(ValueError):
            _usage_from(orjson.loads(b"".join(seen) if len(seen) != 1 else seen[0]), out)
