"""When each request is sent: Poisson arrivals at a request rate (gamma with burstiness), as vLLM's benchmark does."""

from __future__ import annotations

import math

import numpy as np


def arrival_offsets(n: int, request_rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Seconds from the start at which each of ``n`` requests is sent.

    ``request_rate`` is the mean requests per second; ``inf`` sends them all at once. The gaps
    are gamma-distributed with shape ``burstiness`` and mean ``1 / request_rate``: burstiness 1
    is a Poisson process, below 1 burstier, above 1 more regular.
    """
    if n < 0:
        raise ValueError("n must not be negative")
    if request_rate <= 0:
        raise ValueError("request_rate must be positive")
    if burstiness <= 0:
        raise ValueError("burstiness must be positive")
    if math.isinf(request_rate):
        return [0.0] * n
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=n)
    gaps[:1] = 0.0  # the first request goes at once
    return [float(t) for t in np.cumsum(gaps)]
