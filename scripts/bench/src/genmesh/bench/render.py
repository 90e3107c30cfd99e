"""Text for people: vLLM's summary block for one run, and the report's comparison table in Markdown.

A row of the table is one run (a JSON result). Runs at the same load level (same concurrency, or
same request rate) are compared: each row's output throughput as a ratio of the ceiling line
(``baseline``) and of the best peer (the highest output throughput among rows marked ``peer``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .results import HIGH_STEAL_PERCENT


def fmt(value: Any, spec: str = ".1f") -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, float)):
        return format(value, spec)
    return str(value)


def level(run: dict[str, Any]) -> str:
    """``c=8`` (fixed concurrency, everything at once) or ``4 req/s`` (Poisson, maybe with ``c≤N``)."""
    rate, conc = run.get("request_rate"), run.get("max_concurrency")
    if rate is None:
        return f"c={conc}" if conc else "all at once"
    return f"{fmt(rate, 'g')} req/s" + (f", c<={conc}" if conc else "")


def summary_block(run: dict[str, Any]) -> str:
    """The run as vLLM's ``benchmark_serving`` prints it."""
    lines = [f"{' Serving Benchmark Result: ' + str(run.get('label', '')) + ' ':=^60}"]

    def row(name: str, value: Any, spec: str = ".2f") -> None:
        lines.append(f"{name:<40}{fmt(value, spec):>20}")

    row("Successful requests:", run["completed"], "d")
    row("Failed requests:", run["failed"], "d")
    row("Load:", level(run), "")
    row("Benchmark duration (s):", run["duration_s"])
    row("Total input tokens:", run["total_input_tokens"], "d")
    row("Total generated tokens:", run["total_output_tokens"], "d")
    row("Request throughput (req/s):", run["request_throughput"])
    if run.get("goodput") is not None:
        row("Request goodput (req/s):", run["goodput"])
    row("Output token throughput (tok/s):", run["output_throughput"])
    row("Total token throughput (tok/s):", run["total_token_throughput"])
    for key, title in (("ttft", "Time to First Token"), ("tpot", "Time per Output Token (excl. 1st token)")):
        lines.append(f"{' ' + title + ' ':-^60}")
        for stat in ("mean", "median", "p90", "p99"):
            row(
                f"{stat.capitalize() if stat in ('mean', 'median') else stat.upper()} {key.upper()} (ms):",
                run.get(f"{stat}_{key}_ms"),
            )
    for key, title in (("itl", "Inter-token Latency"), ("e2el", "End-to-end Latency")):
        lines.append(f"{' ' + title + ' ':-^60}")
        for stat in ("mean", "median", "p90", "p99"):
            row(
                f"{stat.capitalize() if stat in ('mean', 'median') else stat.upper()} {key.upper()} (ms):",
                run.get(f"{stat}_{key}_ms"),
            )
    steal = run.get("steal_percent")
    flag = "  HIGH" if run.get("high_steal") else ""
    lines.append(f"{'CPU steal during the run (%):':<40}{fmt(steal):>20}{flag}")
    lines.append("=" * 60)
    return "\n".join(lines)


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or not base:
        return None
    return value / base


def ratios(runs: Sequence[dict[str, Any]], baseline: str) -> list[tuple[float | None, float | None]]:
    """(throughput / the ``baseline`` line's, throughput / the best peer's) for each run, at its level."""
    base: dict[str, float] = {}
    best_peer: dict[str, float] = {}
    for run in runs:
        lv, tput = level(run), run.get("output_throughput")
        if not tput or not run.get("completed"):
            continue
        if run.get("target") == baseline:
            base[lv] = float(tput)
        if run.get("peer"):
            best_peer[lv] = max(best_peer.get(lv, 0.0), float(tput))
    return [
        (
            _ratio(r.get("output_throughput"), base.get(level(r))),
            _ratio(r.get("output_throughput"), best_peer.get(level(r))),
        )
        for r in runs
    ]


TABLE_COLUMNS = (
    "line",
    "load",
    "ok/failed",
    "req/s",
    "output tok/s",
    "TTFT p50 ms",
    "TTFT p99 ms",
    "TPOT p50 ms",
    "TPOT p99 ms",
    "ITL p50 ms",
    "E2E p50 ms",
    "steal %",
    "other CPU %",
    "vs (a)",
    "vs best peer",
)


def markdown_table(runs: Sequence[dict[str, Any]], baseline: str) -> str:
    """One row per run; a steal at or above the threshold is marked ⚠. "other CPU" is the busy share of
    the machine not used by the measured processes (other tenants of this guest)."""
    rows = ["| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "|".join(" --- " for _ in TABLE_COLUMNS) + "|"]
    for run, (vs_base, vs_peer) in zip(runs, ratios(runs, baseline), strict=True):
        steal = fmt(run.get("steal_percent"))
        if run.get("high_steal"):
            steal += " ⚠"
        cells = [
            str(run.get("label", "")),
            level(run),
            f"{run.get('completed', 0)}/{run.get('failed', 0)}",
            fmt(run.get("request_throughput"), ".2f"),
            fmt(run.get("output_throughput")),
            fmt(run.get("median_ttft_ms"), ".0f"),
            fmt(run.get("p99_ttft_ms"), ".0f"),
            fmt(run.get("median_tpot_ms")),
            fmt(run.get("p99_tpot_ms")),
            fmt(run.get("median_itl_ms")),
            fmt(run.get("median_e2el_ms"), ".0f"),
            steal,
            fmt(run.get("other_percent"), ".0f"),
            fmt(vs_base, ".2f"),
            fmt(vs_peer, ".2f"),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def high_steal_note(runs: Sequence[dict[str, Any]]) -> str | None:
    flagged = [f"{r.get('label')} {level(r)} ({fmt(r.get('steal_percent'))} %)" for r in runs if r.get("high_steal")]
    if not flagged:
        return None
    return (
        f"⚠ CPU steal at or above {HIGH_STEAL_PERCENT:.0f} % during: "
        + "; ".join(flagged)
        + ". The hypervisor gave these cores to other guests for that share of the run: compare those rows with care."
    )
