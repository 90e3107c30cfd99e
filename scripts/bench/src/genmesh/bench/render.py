"""For people: the one table writer (aligned text or Markdown), progress lines on stderr (stdout keeps
only the results), and the charts comparing runs."""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def fmt(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec) if isinstance(value, (int, float)) else str(value)


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


def chat_cost_table(rows: Sequence[dict[str, Any]], args: Any, beside: str, key: str, digits: int) -> str:
    """The chat-cost table of a side-by-side bench (embeddings, audio): the chat model's tok/s per
    variant, its ratio to the model alone, and the ``key`` figure served beside (``beside``)."""
    lines = [
        f"Chat throughput ({args.chat_concurrency} streams x {args.chat_max_tokens} tokens, median of {args.rounds} "
        "interleaved rounds; ratio: median of the rounds' ratios to the chat model alone)",
        "",
        f"| engine | chat tok/s | ratio | {beside} |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['chat_tok_s']:.1f} | {r['ratio']:.3f} | {r[key]:.{digits}f} |")
    return "\n".join(lines)


def level(run: dict[str, Any]) -> str:
    """``c=8`` (fixed concurrency, everything at once) or ``4 req/s`` (Poisson, maybe with ``c<=N``); a dataset
    other than ``random`` is named after it (``8 req/s mixed``)."""
    rate, conc = run.get("request_rate"), run.get("max_concurrency")
    dataset = f" {d}" if (d := run.get("dataset")) not in (None, "random") else ""  # levels compare within a set
    if rate is None:
        return (f"c={conc}" if conc else "all at once") + dataset
    return f"{fmt(rate, 'g')} req/s" + (f", c<={conc}" if conc else "") + dataset


def plot_all(runs: Sequence[dict[str, Any]], out_dir: Path, prefix: str = "", top: int | None = None) -> list[Path]:
    """Throughput against concurrency (a line per label), and CDFs of TTFT and TPOT (``top``: at that c)."""
    at = [r for r in runs if r.get("max_concurrency") == top and r.get("request_rate") is None] if top else runs
    groups: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in runs:
        if r.get("max_concurrency") and r.get("request_rate") is None and r.get("dataset") in (None, "random"):
            groups[str(r.get("label", "run"))].append((int(r["max_concurrency"]), float(r["output_throughput"])))
    written = []
    for name, xlabel in (("throughput", "concurrent requests"), ("ttft", "TTFT (ms)"), ("tpot", "TPOT (ms)")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        if name == "throughput":
            for label, points in groups.items():
                ax.plot(*zip(*sorted(points), strict=True), marker="o", label=label)
            ax.set_xscale("log", base=2)
            ax.set(ylabel="output tokens/s", title="Output throughput vs concurrency")
        else:
            for run in at:
                if (samples := np.sort(np.asarray(run.get(f"{name}s_ms") or [], dtype=np.float64))).size:
                    label = str(run.get("label", "run")) + (f" c={c}" if (c := run.get("max_concurrency")) else "")
                    ax.step(samples, np.arange(1, samples.size + 1) / samples.size, where="post", label=label)
            title = f"{name.upper()} at c={top}" if top else f"{xlabel} distribution"
            ax.set(ylabel="fraction of requests", title=title)
        if ax.lines:  # a chart with nothing to draw is not written
            ax.set_xlabel(xlabel)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8 if name == "throughput" else 7)
            fig.tight_layout()
            out_dir.mkdir(parents=True, exist_ok=True)
            fig.savefig(path := out_dir / f"{prefix}{name}.png", dpi=110)
            written.append(path)
        plt.close(fig)
    return written
