"""PNG charts comparing runs: output throughput against concurrency, and TTFT and TPOT distributions.

Runs are grouped into lines by their ``label``; the x axis of the throughput chart is each run's
``max_concurrency``. Distributions are empirical CDFs of the per-request samples in each result.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def _by_label(runs: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        groups[str(run.get("label", "run"))].append(run)
    return groups


def throughput_vs_concurrency(runs: Sequence[dict[str, Any]], path: Path, title: str = "") -> Path | None:
    """Output tokens/s against concurrency, one line per label; ``None`` when no run has a concurrency."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for label, group in _by_label(runs).items():
        points = sorted(
            (int(r["max_concurrency"]), float(r["output_throughput"]))
            for r in group
            if r.get("max_concurrency") and r.get("request_rate") is None
        )
        if not points:
            continue
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, marker="o", label=label)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("output tokens/s")
    ax.set_title(title or "Output throughput vs concurrency")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def distribution(runs: Sequence[dict[str, Any]], key: str, path: Path, xlabel: str, title: str = "") -> Path | None:
    """Empirical CDF of ``run[key]`` (a list of milliseconds) for each run; ``None`` without samples."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for run in runs:
        samples = np.sort(np.asarray(run.get(key) or [], dtype=np.float64))
        if samples.size == 0:
            continue
        conc = run.get("max_concurrency")
        name = str(run.get("label", "run")) + (f" c={conc}" if conc else "")
        ax.step(samples, np.arange(1, samples.size + 1) / samples.size, where="post", label=name)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of requests")
    ax.set_title(title or f"{xlabel} distribution")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(runs: Sequence[dict[str, Any]], out_dir: Path, prefix: str = "") -> list[Path]:
    """The three charts for ``runs`` into ``out_dir``; returns the files written."""
    written = [
        throughput_vs_concurrency(runs, out_dir / f"{prefix}throughput.png"),
        distribution(runs, "ttfts_ms", out_dir / f"{prefix}ttft.png", "TTFT (ms)"),
        distribution(runs, "tpots_ms", out_dir / f"{prefix}tpot.png", "TPOT (ms)"),
    ]
    return [p for p in written if p is not None]
