"""One measured run: warm-up, then the load under a :class:`StealMeter`, into a JSON result."""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Sequence
from typing import Any

from .client import Endpoint
from .datasets import RequestSpec
from .load import LoadResult, run_load
from .results import make_result
from .steal import StealMeter


async def measure_async(
    endpoint: Endpoint,
    requests: Sequence[RequestSpec],
    *,
    label: str,
    request_rate: float = math.inf,
    max_concurrency: int | None = None,
    warmup: Sequence[RequestSpec] = (),
    pids: Sequence[int] = (),
    slos: dict[str, float] | None = None,
    settings: dict[str, Any] | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    progress: bool = True,
    health_url: str | None = None,
) -> tuple[dict[str, Any], LoadResult]:
    """Warm up with ``warmup`` (all at once, not measured), then measure ``requests``.

    ``pids`` are the server processes whose CPU time is not "other work" on the machine.
    """
    if warmup:
        await run_load(endpoint, warmup, max_concurrency=max_concurrency, progress=False)
    with StealMeter([os.getpid(), *pids]) as meter:
        load = await run_load(
            endpoint,
            requests,
            request_rate=request_rate,
            max_concurrency=max_concurrency,
            burstiness=burstiness,
            seed=seed,
            progress=progress,
            desc=label,
            health_url=health_url,
        )
    run_settings = {
        "base_url": endpoint.base_url,
        "api": endpoint.api,
        "model_id": endpoint.model,
        "num_prompts": len(requests),
        "request_rate": None if math.isinf(request_rate) else request_rate,
        "burstiness": burstiness,
        "max_concurrency": max_concurrency,
        "ignore_eos": endpoint.ignore_eos,
        "max_tokens": sorted({r.output_len for r in requests}),
        **(settings or {}),
    }
    return make_result(label, load, meter, slos=slos, settings=run_settings), load


def measure(endpoint: Endpoint, requests: Sequence[RequestSpec], **kwargs: Any) -> dict[str, Any]:
    """:func:`measure_async` in a fresh event loop (from synchronous code)."""
    result, _ = asyncio.run(measure_async(endpoint, requests, **kwargs))
    return result
