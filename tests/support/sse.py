"""A small SSE reader for tests (the OpenAI client is exercised separately)."""

from __future__ import annotations

import json
from typing import Any

import httpx


def events(response: httpx.Response) -> list[str]:
    """All ``data:`` payloads of an SSE response, in order."""
    out = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            out.append(line[len("data: ") :])
    return out


def chunks(payloads: list[str]) -> list[dict[str, Any]]:
    assert payloads, "no SSE events"
    assert payloads[-1] == "[DONE]", f"stream did not end with [DONE]: {payloads[-3:]}"
    assert payloads.count("[DONE]") == 1
    return [json.loads(p) for p in payloads[:-1]]
