"""Whose fault an upstream's error answer is. A 4xx, or a 5xx (a reply, or an SSE error event) whose
error names the request as the cause (``REQUEST_CAUSED_CODES``: ``queue_full``, a request that can
never fit the upstream's queue; or a type of ``invalid_request_error``), is the client's answer: it
is relayed as it came, never replayed on another upstream and never counted against the upstream's
circuit. Only the rest (connect failures, timeouts, other 502/503s, broken streams) are the
upstream's own faults."""

from __future__ import annotations

from typing import Any

import orjson

REQUEST_CAUSED_CODES = frozenset({"queue_full"})
PEEK_BYTES = 4096  # of an upstream's 502/503 body, read to tell whose fault it is


def request_caused(status: int, body: bytes) -> bool:
    """Whether an upstream's answer with ``status`` and (the start of) ``body`` blames the request."""
    if 400 <= status < 500:
        return True
    return blames_request(body)


def blames_request(payload: bytes) -> bool:
    """Whether an OpenAI error body, or an SSE event carrying one, names the request as its cause."""
    start = payload.find(b"{")
    if start == -1:
        return False
    try:
        data: Any = orjson.loads(payload[start:].strip())
    except ValueError:
        return False
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return False
    return error.get("code") in REQUEST_CAUSED_CODES or error.get("type") == "invalid_request_error"
