"""Requests sent alongside an abuse: another client's POSTs, one after another in a thread, while a block runs.

``unharmed`` (an engine), ``admission.abuse`` and the tenancy test's ``abuse`` (a gateway) check the same thing
this way: every one of those requests, at least one of which was sent while the block ran, was answered 200.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Alongside:
    """What the other client saw: each answered request's latency (ms), and every failure."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@contextmanager
def requests_alongside(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None, timeout_s: float = 120
) -> Iterator[Alongside]:
    """POST ``body`` to ``url`` again and again while the block runs (at least once); afterwards each was
    answered 200 and the last one ended within ``timeout_s``."""
    stop, seen = threading.Event(), Alongside()

    def other() -> None:
        with httpx.Client(headers=headers, timeout=timeout_s) as http:
            while not stop.is_set() or not (seen.latencies_ms or seen.errors):
                began = time.monotonic()
                try:
                    r = http.post(url, json=body)
                except httpx.HTTPError as exc:
                    seen.errors.append(repr(exc))
                    continue
                if r.status_code != 200:
                    seen.errors.append(f"{r.status_code} {r.text[:200]}")
                    continue
                seen.latencies_ms.append((time.monotonic() - began) * 1000)

    thread = threading.Thread(target=other, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(timeout_s + 10)
    assert not thread.is_alive(), "the request sent alongside never ended"
    assert not seen.errors, f"requests sent alongside failed: {seen.errors[:3]}"
    assert seen.latencies_ms, "no request was answered alongside"
