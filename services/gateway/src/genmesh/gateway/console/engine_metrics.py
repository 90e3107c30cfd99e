"""An engine's load as its Prometheus metrics tell it: KV-cache use, running and waiting, restarts."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

_WANTED = {
    "genmesh_engine_kv_cache_usage_ratio": "kv_cache_usage",
    "genmesh_engine_requests_running": "running",
    "genmesh_engine_requests_waiting": "waiting",
    "genmesh_engine_core_restarts": "restarts",
}
MAX_METRICS_BYTES = 2 * 1024 * 1024


def parse(text: str) -> dict[str, float]:
    """The wanted series, summed over their labels; a series the engine lacks is absent."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            if name in _WANTED and not sample.name.endswith("_created"):
                key = _WANTED[name]
                out[key] = out.get(key, 0.0) + float(sample.value)
    return out


async def scrape(client: httpx.AsyncClient, url: str, timeout_s: float) -> dict[str, Any]:
    """``{"ok": bool, ...parse(...)}``; an engine that does not answer in ``timeout_s`` is ``ok: false``."""
    with contextlib.suppress(httpx.HTTPError, OSError, ValueError):
        r = await client.get(url, timeout=timeout_s)
        if r.status_code == 200 and len(r.content) <= MAX_METRICS_BYTES:
            found = parse(r.text)
            if "kv_cache_usage" in found:  # a genmesh engine: its restart counter is 0 until the first
                found.setdefault("restarts", 0.0)
            return {"ok": True, **found}
    return {"ok": False}
