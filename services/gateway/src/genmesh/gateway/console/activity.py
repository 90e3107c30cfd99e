"""What this replica served recently, kept in memory with bounds, for the console.

The request path calls ``finished`` once per request (a few additions to this second's counters and,
when it has them, two appends); while a console is open the status loop reads it once per interval
and publishes it to Redis, where the viewed replica sums every replica's activity.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

RATE_WINDOW_S = 10  # rates (tokens/s, 429/s, 5xx/s) over the last ten complete seconds
MAX_SAMPLES = 512  # per model: queue waits and TTFTs remembered for percentiles


@dataclass
class ModelActivity:
    # per second: [unix second, completion tokens, finished requests, 429s, 5xxs]; the last few seconds only
    seconds: deque[list[int]] = field(default_factory=lambda: deque(maxlen=RATE_WINDOW_S + 2))
    # (time, value rounded as published) of recent queue waits and times to first output
    waits: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    ttfts: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))


class Activity:
    def __init__(self) -> None:
        self.models: dict[str, ModelActivity] = {}

    def _model(self, model: str) -> ModelActivity:
        act = self.models.get(model)
        if act is None:
            act = self.models[model] = ModelActivity()
        return act

    def finished(
        self, model: str, status: int, tokens: int = 0, wait_s: float | None = None, ttft_s: float | None = None
    ) -> None:
        """One request's end: its HTTP status, completion tokens, queue wait and time to first output."""
        now = time.time()
        act = self._model(model)
        second = int(now)
        counts = act.seconds[-1] if act.seconds else None
        if counts is None or counts[0] != second:
            counts = [second, 0, 0, 0, 0]
            act.seconds.append(counts)
        counts[1] += tokens
        counts[2] += 1
        if status == 429:
            counts[3] += 1
        elif status >= 500:
            counts[4] += 1
        if wait_s is not None:
            act.waits.append((now, round(wait_s, 4)))
        if ttft_s is not None:
            act.ttfts.append((now, round(ttft_s, 4)))

    def snapshot(self, window_s: float) -> dict[str, Any]:
        """This replica's rates and recent samples per model, as published to Redis."""
        now = time.time()
        since, until = int(now) - RATE_WINDOW_S, int(now)  # complete seconds only: no partial one
        cutoff = now - window_s
        out: dict[str, Any] = {}
        for name, act in self.models.items():
            tokens = requests = r429 = r5xx = 0
            for second, tok, req, n429, n5xx in act.seconds:
                if since <= second < until:
                    tokens, requests, r429, r5xx = tokens + tok, requests + req, r429 + n429, r5xx + n5xx
            out[name] = {
                "tokens_per_s": tokens / RATE_WINDOW_S,
                "requests_per_s": requests / RATE_WINDOW_S,
                "rate_429": r429 / RATE_WINDOW_S,
                "rate_5xx": r5xx / RATE_WINDOW_S,
                "waits": [w for t, w in act.waits if t >= cutoff],
                "ttfts": [w for t, w in act.ttfts if t >= cutoff],
            }
        return out
