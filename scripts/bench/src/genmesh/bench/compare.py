"""How every comparison is made: the same work against each target in rounds, alternating which goes
first so that drift in machine noise lands on every target, as ratios and differences. Steal that
lands on one target and not the other still skews a comparison (seen: 19 % and 31 % in two
microservice batches, under 2 % in every engine batch; an HTTP/in-process ratio of 0.78 beside
0.96), so it is judged on the quiet rounds (no measurement lost over 5 % to steal) when there are
two or more, and on every round otherwise, and says which."""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .datasets import RequestSpec, chat_batch
from .load import Endpoint, measure, send, session
from .render import fmt, say
from .results import Result, cpu_seconds, percentile

QUIET_STEAL_PCT = 5.0
ADDED = ("added_ttft_ms_p50", "added_idle_ttft_ms_p50")  # the TTFT a hop adds: within rounds, one at a time
T = TypeVar("T")


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, ``None`` when either is missing or ``b`` is zero."""
    return None if a is None or not b else a / b


def difference(a: float | None, b: float | None) -> float | None:
    """``a - b``, ``None`` when either is missing."""
    return None if a is None or b is None else a - b


def rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def is_quiet(steals: Iterable[float | None], max_steal_pct: float = QUIET_STEAL_PCT) -> bool:
    """Whether no measurement lost more than ``max_steal_pct`` of the CPU to steal (unknown is not quiet)."""
    return all(s is not None and s <= max_steal_pct for s in steals)


@dataclass(frozen=True)
class Kept:
    """The rounds a comparison is judged on (1-based), and in words."""

    rounds: list[int]
    basis: str
    quiet: bool  # False: fewer than two rounds were quiet, so every round is kept

    def of(self, results: Sequence[T]) -> list[T]:
        return [results[i - 1] for i in self.rounds]


def keep_quiet(
    rounds: Mapping[str, Sequence[Result]], max_steal_pct: float = QUIET_STEAL_PCT, noun: str = "rounds"
) -> Kept:
    """The rounds in which no target's measurement lost more than ``max_steal_pct`` of the CPU to steal,
    when there are two or more of them; otherwise every round."""
    n = min(len(r) for r in rounds.values())
    quiet = [i + 1 for i in range(n) if is_quiet((r[i]["steal_percent"] for r in rounds.values()), max_steal_pct)]
    rule = f"steal <= {max_steal_pct:g}%" + (" in every batch" if len(rounds) > 1 else "")
    if len(quiet) >= 2:
        return Kept(quiet, f"{len(quiet)} quiet {noun} of {n} ({rule})", True)
    return Kept(list(range(1, n + 1)), f"all {n} {noun} (fewer than 2 with {rule})", False)


async def alternate(measures: Mapping[str, Callable[[int], Awaitable[Result]]], rounds: int) -> dict[str, list[Result]]:
    """``rounds`` measurements per target (``measures[name](round index)``), alternating which goes first;
    the results per target in round order, each with its ``round`` and the round's ``order``."""
    out: dict[str, list[Result]] = {name: [] for name in measures}
    for r in range(rounds):
        order = list(measures) if r % 2 == 0 else list(measures)[::-1]
        for name in order:
            result = await measures[name](r) | {"round": r + 1, "order": order}
            out[name].append(result)
            took = f"{result['total_output_tokens']} tokens in {result['duration_s']:.2f}s, failed {result['failed']}"
            say(f"round {r + 1} {name:<12} {took}, steal {fmt(result['steal_percent'])}%")
    return out


async def hop_rounds(
    targets: Mapping[str, Endpoint], batch: Sequence[RequestSpec], rounds: int, pids: Sequence[int], watch: int | None
) -> dict[str, list[Result]]:
    """A batch (all at once) per target and round; the first round warms each target up (4 short
    requests, not measured). ``watched_cpu_s``: CPU seconds of process ``watch`` during the batch."""
    warm = [RequestSpec(r.prompt, r.prompt_len, 8, r.system) for r in batch[:4]]

    def cpu_s() -> float | None:
        return sum(cpu_seconds([watch]).values()) if watch else None

    def target(name: str) -> Callable[[int], Awaitable[Result]]:
        async def run(r: int) -> Result:
            cpu0, warmup, settings = cpu_s(), warm if r == 0 else [], {"target": name}
            result = await measure(targets[name], batch, label=name, warmup=warmup, pids=pids, settings=settings)
            return result | {"watched_cpu_s": difference(cpu_s(), cpu0)}

        return run

    return await alternate({name: target(name) for name in targets}, rounds)


async def idle_ttfts(targets: Mapping[str, Endpoint], n: int, max_tokens: int) -> dict[str, list[float]]:
    """TTFT (ms) of ``n`` requests per target sent one at a time, alternating targets request by
    request: what a hop adds when nothing else competes for the CPU."""
    out: dict[str, list[float]] = {name: [] for name in targets}
    clients = {name: session(endpoint.base_url, 1) for name, endpoint in targets.items()}
    try:
        for req in chat_batch(n, max_tokens):
            for name, endpoint in targets.items():
                if (ttft := (await send(clients[name], endpoint, req)).ttft_s) is not None:
                    out[name].append(ttft * 1000.0)
    finally:
        for client in clients.values():
            await client.close()
    return out


def totals(results: Sequence[Result]) -> dict[str, Any]:
    """All batches of one target together."""
    duration, tokens = sum(r["duration_s"] for r in results), sum(r["total_output_tokens"] for r in results)
    ttfts = [t for r in results for t in r["ttfts_ms"]]
    steals = [r["steal_percent"] for r in results if r["steal_percent"] is not None]
    cpu = [r["watched_cpu_s"] for r in results if r.get("watched_cpu_s") is not None]
    return {
        "tokens": tokens,
        "tokens_per_s": tokens / duration if duration > 0 else 0.0,
        "ttft_p50_ms": percentile(ttfts, 50),
        "ttft_p99_ms": percentile(ttfts, 99),
        "steal_percent": statistics.fmean(steals) if steals else None,
        "errors": sum(r["failed"] for r in results),
        "cpu_s": sum(cpu) if cpu else None,
    }


def compare_hop(
    rounds: Mapping[str, Sequence[Result]], hop: str, idle: Mapping[str, list[float]], targets: tuple[float, float]
) -> Result:
    """``hop`` (the path through a service) against ``engine`` (straight to it) on the kept rounds:
    throughput ratio and added TTFT, overall and round by round, and one request at a time, each
    against ``targets`` (the least throughput ratio, the most added TTFT p50 in ms)."""
    kept = keep_quiet(rounds)
    t = {name: totals(kept.of(results)) for name, results in rounds.items()}
    pairs = list(zip(kept.of(rounds[hop]), kept.of(rounds["engine"]), strict=True))
    p50 = {name: percentile(ttfts, 50) for name, ttfts in idle.items()}
    steals = [s for s in (t[hop]["steal_percent"], t["engine"]["steal_percent"]) if s is not None]
    tput = round(ratio(t[hop]["tokens_per_s"], t["engine"]["tokens_per_s"]) or 0.0, 3)
    added = rounded(difference(t[hop]["ttft_p50_ms"], t["engine"]["ttft_p50_ms"]))
    added_idle = rounded(difference(p50.get(hop), p50.get("engine")))
    min_ratio, max_added = targets
    return {
        "judged_on": kept.basis,
        "rounds_kept": kept.rounds,
        **t,
        "throughput_ratio": tput,
        "throughput_ratio_per_round": [
            rounded(ratio(a["output_throughput"], b["output_throughput"]), 3) for a, b in pairs
        ],
        "added_ttft_ms_p50": added,
        "added_ttft_ms_p99": rounded(difference(t[hop]["ttft_p99_ms"], t["engine"]["ttft_p99_ms"])),
        # The p50 difference within each kept round: its spread is the noise a 32-stream burst has here.
        "added_ttft_ms_p50_per_round": [
            rounded(difference(percentile(a["ttfts_ms"], 50), percentile(b["ttfts_ms"], 50))) for a, b in pairs
        ],
        # One request at a time, alternating targets: the path's own latency, nothing competing for the CPU.
        "idle_ttft_ms_p50": {name: rounded(v) for name, v in p50.items()},
        "added_idle_ttft_ms_p50": added_idle,
        "cpu_steal_pct": rounded(statistics.fmean(steals), 1) if steals else None,
        "targets": {"throughput_ratio": f">= {min_ratio}"} | dict.fromkeys(ADDED, f"<= {max_added:g}"),
        "targets_met": {"throughput_ratio": tput >= min_ratio}
        | {
            key: value is not None and value <= max_added for key, value in zip(ADDED, (added, added_idle), strict=True)
        },
    }
