"""What the gateway adds to the shared relay (``genmesh.relay``): the usage chunk it asks the
upstream for (to account tokens, dropped before the client sees it when the client did not ask),
the upstream's headers it passes on, and what its failures are called."""

from __future__ import annotations

import json
from typing import Any

import orjson

from genmesh.protocol import OpenAIError
from genmesh.relay import Failures, UpstreamResponse

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


def too_many_requests(message: str, code: str) -> OpenAIError:
    return OpenAIError(message, status=429, type="rate_limit_error", code=code)


def with_retry_after(err: OpenAIError, seconds: int) -> OpenAIError:
    """``err`` with ``Retry-After`` (whole seconds, at least 1): when the client may come back."""
    err.headers = {**err.headers, "Retry-After": str(max(1, seconds))}
    return err


def bad_gateway(message: str) -> OpenAIError:
    return OpenAIError(message, status=502, type="upstream_error", code="bad_gateway")


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


def failures(first_token_timeout_s: float, total_timeout_s: float) -> Failures:
    def timeout(which: str) -> OpenAIError:
        return upstream_timeout(which, first_token_timeout_s if which == "first token" else total_timeout_s)

    def broken(exc: BaseException) -> OpenAIError:
        return bad_gateway(f"upstream stream failed: {type(exc).__name__}")

    return Failures(timeout=timeout, broken=broken)
