"""How every comparison is made: the same work against each target in rounds that alternate which
goes first, as ratios and differences, judged on the quiet rounds (no measurement lost over 5 % to
steal) when two or more, else on all, saying which: steal on one side skews it (seen: 19 % and 31 %
in two microservice batches, under 2 % in every engine batch; an HTTP/in-process ratio of 0.78)."""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .render import fmt, say
from .results import Result, percentile

QUIET_STEAL_PCT = 5.0
T = TypeVar("T")
ADDED = ("added_ttft_ms_p50", "added_idle_ttft_ms_p50")  # the TTFT a hop adds: within rounds, one at a time


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, ``None`` when either is missing or ``b`` is zero."""
    return None if a is None or not b else a / b


def difference(a: float | None, b: float | None) -> float | None:
    """``a - b``, ``None`` when either is missing."""
    return None if a is None or b is None else a - b


def rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True)
class Kept:
    rounds: list[int]  # those a comparison is judged on, 1-based
    basis: str  # which, in words ("all N rounds" when fewer than two were quiet)

    def of(self, results: Sequence[T]) -> list[T]:
        return [results[i - 1] for i in self.rounds]


def keep_quiet(
    rounds: Mapping[str, Sequence[Result]], max_steal_pct: float = QUIET_STEAL_PCT, noun: str = "rounds"
) -> Kept:
    """The rounds no target lost over ``max_steal_pct`` of the CPU to steal in (unknown steal is not quiet),
    if two or more; else all."""
    n, steals = min(len(r) for r in rounds.values()), [[r["steal_percent"] for r in rs] for rs in rounds.values()]
    quiet = [i + 1 for i in range(n) if all(s[i] is not None and s[i] <= max_steal_pct for s in steals)]
    rule = f"steal <= {max_steal_pct:g}%" + (" in every batch" if len(rounds) > 1 else "")
    if len(quiet) >= 2:
        return Kept(quiet, f"{len(quiet)} quiet {noun} of {n} ({rule})")
    return Kept(list(range(1, n + 1)), f"all {n} {noun} (fewer than 2 with {rule})")


async def alternate(measures: Mapping[str, Callable[[int], Awaitable[Result]]], rounds: int) -> dict[str, list[Result]]:
    """``rounds`` of ``measures[name](round)`` per target, alternating which goes first; each in round order."""
    out: dict[str, list[Result]] = {name: [] for name in measures}
    for r in range(rounds):
        order = list(measures) if r % 2 == 0 else list(measures)[::-1]
        for name in order:
            result = await measures[name](r) | {"round": r + 1, "order": order}
            out[name].append(result)
            took = f"{result['total_output_tokens']} tokens in {result['duration_s']:.2f}s, failed {result['failed']}"
            say(f"round {r + 1} {name:<12} {took}, steal {fmt(result['steal_percent'])}%")
    return out


def totals(results: Sequence[Result], tree: str) -> dict[str, Any]:
    """All batches of one target together; ``cpu_s``: what the process tree named ``tree`` spent in them."""
    duration, tokens = sum(r["duration_s"] for r in results), sum(r["total_output_tokens"] for r in results)
    ttfts = [t for r in results for t in r["ttfts_ms"]]
    steals = [r["steal_percent"] for r in results if r["steal_percent"] is not None]
    cpu = [p["cpu_s"] for r in results for p in r.get("processes") or [] if p["process"] == tree]
    out = {"tokens": tokens, "tokens_per_s": tokens / duration if duration > 0 else 0.0}
    out |= {"ttft_p50_ms": percentile(ttfts, 50), "ttft_p99_ms": percentile(ttfts, 99)}
    out |= {"steal_percent": statistics.fmean(steals) if steals else None, "errors": sum(r["failed"] for r in results)}
    return out | {"cpu_s": sum(cpu) if cpu else None}


def compare_hop(
    rounds: Mapping[str, Sequence[Result]],
    hop: str,
    idle: Mapping[str, list[float]],
    targets: tuple[float, float | None],
    base: str = "engine",
    max_steal_pct: float = QUIET_STEAL_PCT,
) -> Result:
    """``hop`` against ``base`` on the kept rounds: throughput ratio and added TTFT, overall, per round and
    one request at a time, each against ``targets`` (the least throughput ratio, the most ms added, if any)."""
    kept = keep_quiet(rounds, max_steal_pct)
    t = {name: totals(kept.of(results), name) for name, results in rounds.items()}
    pairs = list(zip(kept.of(rounds[hop]), kept.of(rounds[base]), strict=True))
    p50 = {name: percentile(ttfts, 50) for name, ttfts in idle.items()}
    steals = [s for s in (t[hop]["steal_percent"], t[base]["steal_percent"]) if s is not None]
    tput = round(ratio(t[hop]["tokens_per_s"], t[base]["tokens_per_s"]) or 0.0, 3)
    added = rounded(difference(t[hop]["ttft_p50_ms"], t[base]["ttft_p50_ms"]))
    added_idle = rounded(difference(p50.get(hop), p50.get(base)))
    ratios = [rounded(ratio(a["output_throughput"], b["output_throughput"]), 3) for a, b in pairs]
    # The p50 difference within each kept round: its spread is the noise a 32-stream burst has here.
    diffs = [rounded(difference(percentile(a["ttfts_ms"], 50), percentile(b["ttfts_ms"], 50))) for a, b in pairs]
    out: Result = {"judged_on": kept.basis, "rounds_kept": kept.rounds, **t, "throughput_ratio": tput}
    out |= {"throughput_ratio_per_round": ratios, "added_ttft_ms_p50": added, "added_ttft_ms_p50_per_round": diffs}
    out["added_ttft_ms_p99"] = rounded(difference(t[hop]["ttft_p99_ms"], t[base]["ttft_p99_ms"]))
    # One request at a time, alternating targets: the path's own latency, nothing competing for the CPU.
    out |= {"idle_ttft_ms_p50": {name: rounded(v) for name, v in p50.items()}, "added_idle_ttft_ms_p50": added_idle}
    out["cpu_steal_pct"] = rounded(statistics.fmean(steals), 1) if steals else None
    min_ratio, max_added = targets
    out |= {"targets": {"throughput_ratio": f">= {min_ratio}"}, "targets_met": {"throughput_ratio": tput >= min_ratio}}
    if max_added is not None:
        out["targets"] |= dict.fromkeys(ADDED, f"<= {max_added:g}")
        out["targets_met"] |= {ADDED[0]: added is not None and added <= max_added}
        out["targets_met"] |= {ADDED[1]: added_idle is not None and added_idle <= max_added}
    return out
