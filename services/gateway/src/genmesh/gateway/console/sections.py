"""The console snapshot's per-model and per-upstream rows, from what the status board gathered."""

from __future__ import annotations

import math
from typing import Any

from ..routing.config import RoutingConfig
from ..routing.upstreams import Pool


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def model_rows(config: RoutingConfig, shared: dict[str, Any], waiting: list[list[Any]]) -> list[dict[str, Any]]:
    """One row per routed model: its queue by priority and tenant, running per upstream, rates, percentiles."""
    depths: dict[tuple[str, int], int] = shared.get("depths", {})
    in_flight: dict[tuple[str, str], int] = shared.get("in_flight", {})
    totals: dict[str, dict[str, Any]] = shared.get("totals", {})
    out = []
    for name, route in config.models.items():
        mine = [w for w in waiting if w[0] == name]
        tenants: dict[str, dict[str, Any]] = {}
        for _, _prio, tenant, age in mine:
            t = tenants.setdefault(tenant, {"tenant": tenant, "waiting": 0, "oldest_wait_s": 0.0})
            t["waiting"] += 1
            t["oldest_wait_s"] = max(t["oldest_wait_s"], age)
        by_prio = {str(p): n for (m, p), n in depths.items() if m == name and n}
        if not depths:  # Redis away: what this replica holds
            for _, prio, _, _ in mine:
                by_prio[str(prio)] = by_prio.get(str(prio), 0) + 1
        t = totals.get(name, {})
        out.append(
            {
                "model": name,
                "waiting": sum(by_prio.values()),
                "waiting_by_priority": by_prio,
                "waiting_by_tenant": sorted(tenants.values(), key=lambda x: (-x["waiting"], x["tenant"])),
                "oldest_wait_s": max((w[3] for w in mine), default=0.0),
                "running": [
                    {"upstream": u.name, "running": in_flight.get((name, u.name)), "capacity": u.max_concurrency}
                    for u in route.upstreams
                ],
                "tokens_per_s": round(t.get("tokens_per_s", 0.0), 3),
                "requests_per_s": round(t.get("requests_per_s", 0.0), 3),
                "queue_wait_p50_s": rounded(percentile(t.get("waits", []), 0.5)),
                "queue_wait_p99_s": rounded(percentile(t.get("waits", []), 0.99)),
                "ttft_p50_s": rounded(percentile(t.get("ttfts", []), 0.5)),
                "ttft_p99_s": rounded(percentile(t.get("ttfts", []), 0.99)),
            }
        )
    return out


def upstream_rows(
    pool: Pool, shared: dict[str, Any], engines: dict[tuple[str, str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per upstream of each model: health, circuit (and its last cause), load, its engine's metrics
    and the model's state there (``model_state``: serving, not serving, failed; None: the engine does not say)."""
    in_flight: dict[tuple[str, str], int] = shared.get("in_flight", {})
    out = []
    for model, upstreams in pool.models.items():
        for u in upstreams:
            engine = engines.get((model, u.name), {"ok": False})
            out.append(
                {
                    "model": model,
                    "upstream": u.name,
                    "url": u.url,
                    "healthy": u.available(),
                    "circuit": u.circuit(),
                    "circuit_cause": u.cause,
                    "failures": u.failures,
                    "circuit_opened": u.opened,
                    "in_flight": in_flight.get((model, u.name)),
                    "capacity": u.config.max_concurrency,
                    "engine": {
                        "reachable": bool(engine.get("ok")),
                        "kv_cache_usage": engine.get("kv_cache_usage"),
                        "running": _int(engine.get("running")),
                        "waiting": _int(engine.get("waiting")),
                        "restarts": _int(engine.get("restarts")),
                        "model_state": engine.get("models", {}).get(model),
                        **drafting(engine),
                    },
                }
            )
    return out


def drafting(engine: dict[str, Any]) -> dict[str, float | None]:
    """Speculative decoding since the engine started: draft tokens accepted per request-step, and the
    share of proposed draft tokens accepted. None for an engine that has not drafted: every engine
    counts its request-steps, only a drafting one proposes or gets tokens accepted."""
    steps, accepted, proposed = (engine.get(k) or 0.0 for k in ("draft_steps", "draft_accepted", "draft_proposed"))
    return {
        "draft_accepted_per_step": rounded(accepted / steps) if steps and (accepted or proposed) else None,
        "draft_acceptance": rounded(min(1.0, accepted / proposed)) if proposed else None,
    }


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)
