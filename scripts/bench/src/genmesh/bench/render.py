"""For people: the one table writer (aligned text or Markdown), vLLM's summary block for one run,
progress lines on stderr (stdout keeps only the results), and PNG charts comparing runs: output
throughput against concurrency (a line per ``label``, x: ``max_concurrency``) and empirical CDFs of
the TTFT and TPOT samples."""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def fmt(value: Any, spec: str = ".1f") -> str:
    if value is None:
        return "-"
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def table(header: Sequence[str], rows: Iterable[Sequence[str]], *, markdown: bool = False) -> str:
    """``rows`` under ``header``: a Markdown table, or right-aligned columns under a rule."""
    cells = [list(header), *map(list, rows)]
    if markdown:
        lines = ["| " + " | ".join(row) + " |" for row in cells]
        lines.insert(1, "|" + "|".join(" --- " for _ in header) + "|")
    else:
        widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
        lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def level(run: dict[str, Any]) -> str:
    """``c=8`` (fixed concurrency, everything at once) or ``4 req/s`` (Poisson, maybe with ``c<=N``)."""
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
    titles = {"ttft": "Time to First Token", "tpot": "Time per Output Token (excl. 1st token)"}
    titles |= {"itl": "Inter-token Latency", "e2el": "End-to-end Latency"}
    for key, title in titles.items():
        lines.append(f"{' ' + title + ' ':-^60}")
        for stat in ("Mean", "Median", "P90", "P99"):
            row(f"{stat} {key.upper()} (ms):", run.get(f"{stat.lower()}_{key}_ms"))
    flag = "  HIGH" if run.get("high_steal") else ""
    lines.append(f"{'CPU steal during the run (%):':<40}{fmt(run.get('steal_percent')):>20}{flag}")
    lines.append("=" * 60)
    return "\n".join(lines)


def _chart(path: Path, draw: Callable[[Any], bool], xlabel: str, ylabel: str, title: str, legend: int) -> Path | None:
    """``draw(axes)`` into a new figure saved at ``path``; ``None`` (nothing written) when it drew nothing."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    try:
        if not draw(ax):
            return None
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=legend)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        return path
    finally:
        plt.close(fig)


def throughput_vs_concurrency(runs: Sequence[dict[str, Any]], path: Path, title: str = "") -> Path | None:
    """Output tokens/s against concurrency, one line per label; ``None`` when no run has a concurrency."""
    groups: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in runs:
        if r.get("max_concurrency") and r.get("request_rate") is None:
            groups[str(r.get("label", "run"))].append((int(r["max_concurrency"]), float(r["output_throughput"])))

    def draw(ax: Any) -> bool:
        for label, points in groups.items():
            ax.plot(*zip(*sorted(points), strict=True), marker="o", label=label)
        ax.set_xscale("log", base=2)
        return bool(groups)

    title = title or "Output throughput vs concurrency"
    return _chart(path, draw, "concurrent requests", "output tokens/s", title, 8)


def distribution(runs: Sequence[dict[str, Any]], key: str, path: Path, xlabel: str, title: str = "") -> Path | None:
    """Empirical CDF of ``run[key]`` (a list of milliseconds) for each run; ``None`` without samples."""

    def draw(ax: Any) -> bool:
        drawn = False
        for run in runs:
            samples = np.sort(np.asarray(run.get(key) or [], dtype=np.float64))
            if samples.size:
                name = str(run.get("label", "run")) + (f" c={c}" if (c := run.get("max_concurrency")) else "")
                ax.step(samples, np.arange(1, samples.size + 1) / samples.size, where="post", label=name)
                drawn = True
        return drawn

    return _chart(path, draw, xlabel, "fraction of requests", title or f"{xlabel} distribution", 7)


def plot_all(runs: Sequence[dict[str, Any]], out_dir: Path, prefix: str = "", top: int | None = None) -> list[Path]:
    """The three charts for ``runs`` into ``out_dir``; returns the files written. ``top``: the
    distributions are those of the runs at that concurrency only."""
    at = [r for r in runs if r.get("max_concurrency") == top and r.get("request_rate") is None] if top else runs
    written = [throughput_vs_concurrency(runs, out_dir / f"{prefix}throughput.png")]
    for key, name in (("ttfts_ms", "TTFT"), ("tpots_ms", "TPOT")):
        title = f"{name} at c={top}" if top else ""
        written.append(distribution(at, key, out_dir / f"{prefix}{name.lower()}.png", f"{name} (ms)", title))
    return [p for p in written if p is not None]
