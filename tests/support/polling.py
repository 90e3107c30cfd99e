"""Waiting in tests: poll a condition until it holds, and fail at a deadline. Never a fixed sleep.

``until`` is for async tests (the event loop keeps running the requests under test while it
waits); ``wait_until`` is its twin for plain functions and fixtures. The check may be a plain
function or a coroutine function; both return the moment (``time.monotonic()``) the condition
first held, for tests that measure a recovery time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

EVERY_S = 0.02


def _failed(timeout_s: float, what: str, last: Any) -> AssertionError:
    detail = "" if last is None or isinstance(last, bool) else f" (last: {last!r})"
    return AssertionError(f"timed out after {timeout_s:g} s waiting for {what}{detail}")


async def until(
    check: Callable[[], Any | Awaitable[Any]], timeout_s: float, what: str = "condition", every_s: float = EVERY_S
) -> float:
    """Poll ``check`` (sync or async) until it is truthy; return when it was (monotonic)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return time.monotonic()
        if time.monotonic() >= deadline:
            raise _failed(timeout_s, what, value)
        await asyncio.sleep(every_s)


def wait_until(check: Callable[[], Any], timeout_s: float, interval_s: float = 0.05, what: str = "condition") -> float:
    """``until`` for code outside an event loop: poll ``check`` until it is truthy."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return time.monotonic()
        if time.monotonic() >= deadline:
            raise _failed(timeout_s, what, value)
        time.sleep(interval_s)
