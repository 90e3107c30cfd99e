"""What this replica served recently, kept in memory with bounds, for the console.

The request path calls ``finished`` once per request (a few appends); the status loop reads it once
per interval and publishes it to Redis, where every replica's console sums the replicas' activity.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

RATE_WINDOW_S = 10.0  # rates (tokens/s, 429/s, 5xx/s) over the last ten seconds
MAX_EVENTS = 4096  # per model: finished requests remembered for rates
MAX_SAMPLES = 512  # per model: queue waits and TTFTs remembered for percentiles


@dataclass
class ModelActivity:
    # (time, completion tokens, status) of recently finished requests
    events: deque[tuple[float, int, int]] = field(default_factory=lambda: deque(maxlen=MAX_EVENTS))
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
        act.events.append((now, tokens, status))
        if wait_s is not None:
            act.waits.append((now, wait_s))
        if ttft_s is not None:
            act.ttfts.append((now, ttft_s))

    def snapshot(self, window_s: float) -> dict[str, Any]:
        """This replica's rates and recent samples per model, as published to Redis."""
        now = time.time()
        out: dict[str, Any] = {}
        for name, act in self.models.items():
            recent = [e for e in act.events if e[0] >= now - RATE_WINDOW_S]
            out[name] = {
                "tokens_per_s": sum(e[1] for e in recent) / RATE_WINDOW_S,
                "requests_per_s": len(recent) / RATE_WINDOW_S,
                "rate_429": sum(1 for e in recent if e[2] == 429) / RATE_WINDOW_S,
                "rate_5xx": sum(1 for e in recent if e[2] >= 500) / RATE_WINDOW_S,
                "waits": [round(w, 4) for t, w in act.waits if t >= now - window_s],
                "ttfts": [round(w, 4) for t, w in act.ttfts if t >= now - window_s],
            }
        return out
