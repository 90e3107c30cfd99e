"""An engine's load as its Prometheus metrics tell it: KV-cache use, running and waiting, restarts,
what its draft model (speculative decoding) gets accepted, and each served model's state (serving,
not serving: loading or its core restarting, or failed to load and skipped)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import aiohttp

_WANTED = {
    "genmesh_engine_kv_cache_usage_ratio": "kv_cache_usage",
    "genmesh_engine_requests_running": "running",
    "genmesh_engine_requests_waiting": "waiting",
    "genmesh_engine_core_restarts_total": "restarts",
    "genmesh_engine_core_restarts": "restarts",
    "genmesh_engine_spec_decode_steps_total": "draft_steps",
    "genmesh_engine_spec_decode_accepted_tokens_total": "draft_accepted",
    "genmesh_engine_spec_decode_draft_tokens_total": "draft_proposed",
}
_PREFIX = "genmesh_engine_"
_READY, _FAILED = "genmesh_engine_model_ready{", "genmesh_engine_model_load_failed{"
_MODEL = re.compile(r'model="((?:[^"\\]|\\.)*)"')
_ESCAPED = re.compile(r"\\(.)")  # the exposition format's escapes in a label value: \\, \" and \n
MAX_METRICS_BYTES = 2 * 1024 * 1024


def model_states(text: str) -> dict[str, str]:
    """Each model's state from ``genmesh_engine_model_ready`` and ``genmesh_engine_model_load_failed``:
    ``serving``, ``failed`` (failed to load: skipped while the others serve) or ``not serving``."""
    ready: dict[str, bool] = {}
    failed: set[str] = set()
    for line in text.splitlines():
        if not line.startswith((_READY, _FAILED)):
            continue
        found = _MODEL.search(line)
        fields = line.rpartition("}")[2].split()
        if found is None or not fields:
            continue
        on = fields[0] not in ("0", "0.0")
        model = _ESCAPED.sub(lambda m: "\n" if m[1] == "n" else m[1], found.group(1))
        if line.startswith(_READY):
            ready[model] = on
        elif on:
            failed.add(model)
    return {m: "failed" if m in failed else "serving" if ok else "not serving" for m, ok in ready.items()}


def parse(text: str) -> dict[str, float]:
    """The wanted series, summed over their labels; a series the engine lacks is absent.

    A scan of the exposition's lines for these names, not a full parse: the console reads it once
    per interval while open, and a Prometheus parser spends most of its time on the series nobody shows.
    """
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(_PREFIX):
            continue
        name, brace, rest = line.partition("{")
        if brace:
            rest = rest.rpartition("}")[2]
        else:
            name, _, rest = line.partition(" ")
        key = _WANTED.get(name.strip())
        fields = rest.split()
        if key is None or not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        out[key] = out.get(key, 0.0) + value
    return out


async def scrape(session: aiohttp.ClientSession, url: str, timeout_s: float) -> dict[str, Any]:
    """``{"ok": bool, ...parse(...)}``; an engine that does not answer in ``timeout_s`` is ``ok: false``.

    Read with aiohttp (a quarter of httpx's CPU per request here), at most ``MAX_METRICS_BYTES``."""
    with contextlib.suppress(aiohttp.ClientError, OSError, ValueError, TimeoutError):
        async with asyncio.timeout(timeout_s), session.get(url) as r:
            if r.status == 200:
                body = bytearray()
                async for chunk in r.content.iter_chunked(64 * 1024):
                    body += chunk
                    if len(body) > MAX_METRICS_BYTES:
                        return {"ok": False}
                text = body.decode("utf-8", "replace")
                found = parse(text)
                if "kv_cache_usage" in found:  # a genmesh engine: its restart counter is 0 until the first
                    found.setdefault("restarts", 0.0)
                return {"ok": True, **found, "models": model_states(text)}
    return {"ok": False}
