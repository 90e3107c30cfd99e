"""The same batch against several targets, round after round, alternating which goes first.

Used where one hop is compared with the path without it (``microservice``, ``gateway``): the
order alternates so that drift in machine noise (CPU steal, other tenants) lands on every target.
Steal that lands on one target's batch and not the other's still skews a comparison, so the
comparison keeps only the quiet rounds (:func:`.steal.quiet_indices`) and says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from .client import Endpoint, send, session
from .datasets import RequestSpec
from .progress import say
from .runner import measure_async
from .stats import difference, percentile
from .steal import QUIET_STEAL_PCT, quiet_indices


@dataclass(frozen=True)
class Kept:
    """The batches a comparison is made on, and which rounds they are."""

    batches: dict[str, list[dict[str, Any]]]
    rounds: list[int]  # 1-based
    basis: str


def quiet_rounds(batches: Mapping[str, Sequence[dict[str, Any]]], max_steal_pct: float = QUIET_STEAL_PCT) -> Kept:
    """The rounds in which no target's batch lost more than ``max_steal_pct`` of the CPU to steal,
    when there are two or more of them; otherwise every round."""
    n = min(len(b) for b in batches.values())
    quiet = quiet_indices([[b[i]["steal_percent"] for b in batches.values()] for i in range(n)], max_steal_pct)
    if quiet is not None:
        keep = quiet
        basis = f"{len(keep)} quiet rounds of {n} (steal <= {max_steal_pct:g}% in every batch)"
    else:
        keep = list(range(n))
        basis = f"all {n} rounds (fewer than 2 with steal <= {max_steal_pct:g}% in every batch)"
    kept = {name: [b[i] for i in keep] for name, b in batches.items()}
    return Kept(kept, [i + 1 for i in keep], basis)


def chat_batch(n: int, max_tokens: int) -> list[RequestSpec]:
    """``n`` distinct short chat prompts, ``max_tokens`` new tokens each (``ignore_eos`` makes it exact)."""
    return [RequestSpec(f"Write a short story about a robot, number {i}.", 0, max_tokens) for i in range(n)]


def cpu_seconds(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return float(t.user + t.system)


@dataclass(frozen=True)
class Totals:
    """All batches of one target together."""

    tokens_per_s: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    steal_percent: float | None
    errors: int
    cpu_s: float | None  # CPU seconds of the watched process over its batches


def totals(batches: Sequence[dict[str, Any]]) -> Totals:
    duration = sum(b["duration_s"] for b in batches)
    tokens = sum(b["total_output_tokens"] for b in batches)
    ttfts = [t for b in batches for t in b["ttfts_ms"]]
    steals = [b["steal_percent"] for b in batches if b["steal_percent"] is not None]
    cpu = [b["watched_cpu_s"] for b in batches if b.get("watched_cpu_s") is not None]
    return Totals(
        tokens_per_s=tokens / duration if duration > 0 else 0.0,
        ttft_p50_ms=percentile(ttfts, 50),
        ttft_p99_ms=percentile(ttfts, 99),
        steal_percent=statistics.fmean(steals) if steals else None,
        errors=sum(b["failed"] for b in batches),
        cpu_s=sum(cpu) if cpu else None,
    )


async def alternate(
    targets: Mapping[str, Endpoint],
    requests: Sequence[RequestSpec],
    rounds: int,
    *,
    pids: Sequence[int] = (),
    watch_pid: int | None = None,
    warmup_tokens: int = 8,
) -> dict[str, list[dict[str, Any]]]:
    """``rounds`` batches (all requests at once) per target; results per target in round order."""
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
    warm = [RequestSpec(r.prompt, r.prompt_len, warmup_tokens, r.system) for r in requests[:4]]
    names = list(targets)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            cpu0 = cpu_seconds(watch_pid)
            result, _ = await measure_async(
                targets[name],
                requests,
                label=name,
                warmup=warm if r == 0 else (),
                pids=pids,
                settings={"target": name, "round": r + 1},
                progress=False,
            )
            cpu1 = cpu_seconds(watch_pid)
            result["watched_cpu_s"] = difference(cpu1, cpu0)
            out[name].append(result)
            say(
                f"round {r + 1} {name:<12} {result['total_output_tokens']} tokens in {result['duration_s']:.2f}s, "
                f"failed {result['failed']}, steal {result['steal_percent'] or 0:.1f}%"
            )
    return out


def round_ttft_diffs(hop: Sequence[dict[str, Any]], direct: Sequence[dict[str, Any]]) -> list[float | None]:
    """Per round: TTFT p50 of the batch through the hop minus that of the direct batch of the same round."""
    return [
        difference(percentile(h["ttfts_ms"], 50), percentile(d["ttfts_ms"], 50))
        for h, d in zip(hop, direct, strict=True)
    ]


async def idle_ttfts(targets: dict[str, Endpoint], n: int, max_tokens: int) -> dict[str, list[float]]:
    """TTFT (ms) of ``n`` requests per target sent one at a time, alternating targets request by
    request: what the hop adds when nothing else competes for the CPU."""
    out: dict[str, list[float]] = {name: [] for name in targets}
    clients = {name: session(endpoint.base_url, 1) for name, endpoint in targets.items()}
    try:
        for req in chat_batch(n, max_tokens):
            for name, endpoint in targets.items():
                result = await send(clients[name], endpoint, req)
                if result.ttft_s is not None:
                    out[name].append(result.ttft_s * 1000.0)
    finally:
        for client in clients.values():
            await client.close()
    return out
