"""Console logins throttled per client address: at most ``console_login_attempts`` failed logins in
each ``console_login_window_s`` (a fixed window per address); past it ``POST /console/login`` is a
429 with Retry-After, before the key is even compared. Counted in this replica's memory: the
console must open while Redis is down, so N replicas allow N times the attempts. Bounded: at most
``MAX_ADDRESSES`` addresses are tracked; past it the stalest windows are dropped."""

from __future__ import annotations

import math
import time

MAX_ADDRESSES = 10_000


class LoginThrottle:
    def __init__(self, attempts: int, window_s: float) -> None:
        self.attempts = attempts
        self.window_s = window_s
        self._windows: dict[str, tuple[float, int]] = {}  # address -> (window start, failures)

    def retry_after(self, address: str) -> int:
        """Seconds until ``address`` may try again; 0: it may now."""
        now = time.monotonic()
        start, failures = self._windows.get(address, (now, 0))
        if now - start >= self.window_s:
            self._windows.pop(address, None)
            return 0
        return max(1, math.ceil(start + self.window_s - now)) if failures >= self.attempts else 0

    def failed(self, address: str) -> None:
        now = time.monotonic()
        start, failures = self._windows.get(address, (now, 0))
        if now - start >= self.window_s:
            start, failures = now, 0
        if address not in self._windows and len(self._windows) >= MAX_ADDRESSES:
            for stale in sorted(self._windows, key=lambda a: self._windows[a][0])[: MAX_ADDRESSES // 10]:
                del self._windows[stale]
        self._windows[address] = (start, failures + 1)
