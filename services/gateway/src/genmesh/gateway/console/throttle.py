"""Console logins throttled per client address and per user name: at most
``console_login_attempts`` failed logins from one address, and ``console_login_user_attempts`` for
one user name (the console has one account, ``admin``, unless the form names another), in each
``console_login_window_s``; past either ``POST /console/login`` is a 429 with Retry-After, before
the key is even compared. An attempt is counted before its key is compared, in one step with the
check (``lua/login_attempt.lua``), so a concurrent burst gets no more than its tries; a login that
succeeds gives its attempt back. Counted in Redis, across replicas; while Redis is away, in this
replica's memory (the console must open then too), with the same rule. Bounded: at most
``MAX_ENTRIES`` addresses and names are tracked in memory; past it the stalest windows are dropped."""

from __future__ import annotations

import math
import time

from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from ..redis.keys import KeySpace

MAX_ENTRIES = 10_000


class LoginThrottle:
    """The rule in one replica's memory (and while Redis is away)."""

    def __init__(self, attempts: int, window_s: float, user_attempts: int | None = None) -> None:
        self.limits = (attempts, user_attempts or attempts)
        self.window_s = window_s
        self._windows: dict[str, tuple[float, int]] = {}  # "a:<address>" | "u:<name>" -> (start, attempts)

    def take(self, address: str, user: str) -> int:
        """Count one attempt; 0: it may go on, else the seconds until it may (nothing counted)."""
        now = time.monotonic()
        names = (f"a:{address}", f"u:{user}")
        for name, limit in zip(names, self.limits, strict=True):
            start, count = self._current(name, now)
            if count >= limit:
                return max(1, math.ceil(start + self.window_s - now))
        for name in names:
            start, count = self._current(name, now)
            if name not in self._windows and len(self._windows) >= MAX_ENTRIES:
                for stale in sorted(self._windows, key=lambda a: self._windows[a][0])[: MAX_ENTRIES // 10]:
                    del self._windows[stale]
            self._windows[name] = (start, count + 1)
        return 0

    def give_back(self, address: str, user: str) -> None:
        for name in (f"a:{address}", f"u:{user}"):
            if (entry := self._windows.get(name)) is not None and entry[1] > 0:
                self._windows[name] = (entry[0], entry[1] - 1)

    def _current(self, name: str, now: float) -> tuple[float, int]:
        start, count = self._windows.get(name, (now, 0))
        if now - start >= self.window_s:
            self._windows.pop(name, None)
            return now, 0
        return start, count


class SharedLoginThrottle:
    """The rule in Redis (all replicas count together); this replica's memory while Redis is away."""

    def __init__(
        self, script: AsyncScript, keyspace: KeySpace, attempts: int, user_attempts: int, window_s: float
    ) -> None:
        """``script``: ``redis/lua/login_attempt.lua`` as registered with the gateway's scripts."""
        self.keyspace = keyspace
        self.args = (attempts, user_attempts, int(window_s * 1000))
        self.script = script
        self.local = LoginThrottle(attempts, window_s, user_attempts)

    async def take(self, address: str, user: str) -> int:
        try:
            ok, ms = await self.script(keys=list(self.keyspace.console_login(address, user)), args=[*self.args, "take"])
        except (RedisError, OSError):
            return self.local.take(address, user)
        return 0 if int(ok) else max(1, math.ceil(int(ms) / 1000))

    async def give_back(self, address: str, user: str) -> None:
        try:
            await self.script(keys=list(self.keyspace.console_login(address, user)), args=[*self.args, "give"])
        except (RedisError, OSError):
            self.local.give_back(address, user)
