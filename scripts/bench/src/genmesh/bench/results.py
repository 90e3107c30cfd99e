"""One run's JSON result: what was sent, how, the metrics, the CPU steal, and the per-request samples.

The keys follow vLLM's ``--save-result`` files where they mean the same (``completed``,
``request_throughput``, ``output_throughput``, ``mean_ttft_ms``, ``p99_tpot_ms``, ...), so the
same plotting and comparison code reads both.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .load import LoadResult
from .stats import Distribution, Metrics, percentile, summarize
from .steal import StealMeter

HIGH_STEAL_PERCENT = 10.0


def _flat(metrics: Metrics) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for f in dataclasses.fields(metrics):
        value = getattr(metrics, f.name)
        if isinstance(value, Distribution):
            name = f.name.removesuffix("_ms")
            for stat in ("mean", "median", "std", "p90", "p99"):
                flat[f"{stat}_{name}_ms"] = getattr(value, stat)
        else:
            flat[f.name] = value
    return flat


def make_result(
    label: str,
    load: LoadResult,
    meter: StealMeter | None,
    *,
    slos: dict[str, float] | None = None,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON document of one run (``settings``: target, dataset, rate, concurrency, ...)."""
    metrics = summarize(load.outputs, load.duration_s, slos)
    steal = meter.steal_percent if meter is not None else None
    ok = [o for o in load.outputs if o.success]
    return {
        "label": label,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **(settings or {}),
        **_flat(metrics),
        "goodput_slos_ms": slos or {},
        "steal_percent": steal,
        "busy_percent": meter.busy_percent if meter is not None else None,
        "other_percent": meter.other_percent if meter is not None else None,
        "high_steal": steal is not None and steal >= HIGH_STEAL_PERCENT,
        "errors": load.errors[:20],
        "health_p99_ms": _p99_ms(load.health_latencies_s),
        "ttfts_ms": [o.ttft_s * 1000.0 for o in ok if o.ttft_s is not None],
        "tpots_ms": [t * 1000.0 for o in ok if (t := o.tpot_s) is not None],
        "e2els_ms": [o.e2e_s * 1000.0 for o in ok],
        "output_lens": [o.output_tokens for o in ok],
        "input_lens": [o.prompt_tokens for o in ok],
    }


def _p99_ms(samples_s: list[float]) -> float | None:
    p = percentile(samples_s, 99)
    return None if p is None else p * 1000.0


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else "inf"
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def save(results: dict[str, Any] | list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(results), indent=2) + "\n")
    return path


def load_results(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Runs from JSON files, each holding one result or a list of them."""
    runs: list[dict[str, Any]] = []
    for path in paths:
        data = json.loads(path.read_text())
        runs += data if isinstance(data, list) else [data]
    return runs
