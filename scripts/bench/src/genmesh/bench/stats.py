"""Summary statistics, and the metrics of a run as vLLM's ``benchmark_serving`` reports them.

TTFT is the time to the first generated text; TPOT, per request, (E2E - TTFT) / (output tokens - 1);
ITL every gap between two chunks of generated text; E2E the whole request. Goodput is the
requests per second that met every given SLO (milliseconds; ``ttft``, ``tpot``, ``e2el``).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .client import RequestOutput

SLO_KEYS = ("ttft", "tpot", "e2el")


def percentile(samples: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100, linear interpolation), ``None`` for no samples."""
    if not samples:
        return None
    return float(np.percentile(np.asarray(samples, dtype=np.float64), q))


def difference(a: float | None, b: float | None) -> float | None:
    """``a - b``, ``None`` when either is missing."""
    return None if a is None or b is None else a - b


def median(values: Sequence[float | None]) -> float | None:
    """Median of the values that are not ``None``."""
    present = [v for v in values if v is not None]
    return float(statistics.median(present)) if present else None


@dataclass(frozen=True)
class Distribution:
    """mean, median, std, p90, p99 of samples in milliseconds (all ``None`` without samples)."""

    mean: float | None
    median: float | None
    std: float | None
    p90: float | None
    p99: float | None
    count: int

    @classmethod
    def of_seconds(cls, samples_s: Sequence[float]) -> Distribution:
        if not samples_s:
            return cls(None, None, None, None, None, 0)
        ms = np.asarray(samples_s, dtype=np.float64) * 1000.0
        return cls(
            mean=float(ms.mean()),
            median=float(np.median(ms)),
            std=float(ms.std()),
            p90=float(np.percentile(ms, 90)),
            p99=float(np.percentile(ms, 99)),
            count=len(samples_s),
        )


@dataclass(frozen=True)
class Metrics:
    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    goodput: float | None
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2el_ms: Distribution


def parse_goodput(items: Sequence[str]) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` -> ``{"ttft": 500.0, "tpot": 50.0}`` (milliseconds)."""
    slos: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or key not in SLO_KEYS:
            raise ValueError(f"goodput SLO {item!r}: expected KEY:MS with KEY one of {', '.join(SLO_KEYS)}")
        ms = float(value)
        if ms <= 0:
            raise ValueError(f"goodput SLO {item!r}: milliseconds must be positive")
        slos[key] = ms
    return slos


def meets_slos(out: RequestOutput, slos: Mapping[str, float]) -> bool:
    """Whether one successful request met every SLO (a missing value fails the SLO it is needed for)."""
    values = {
        "ttft": None if out.ttft_s is None else out.ttft_s * 1000.0,
        "tpot": 0.0 if out.output_tokens < 2 else (None if out.tpot_s is None else out.tpot_s * 1000.0),
        "e2el": out.e2e_s * 1000.0,
    }
    for key, limit in slos.items():
        value = values[key]
        if value is None or value > limit:
            return False
    return out.success


def summarize(outputs: Sequence[RequestOutput], duration_s: float, slos: Mapping[str, float] | None = None) -> Metrics:
    ok = [o for o in outputs if o.success]
    total_in = sum(o.prompt_tokens for o in ok)
    total_out = sum(o.output_tokens for o in ok)

    def per_s(x: float) -> float:
        return x / duration_s if duration_s > 0 else 0.0

    good = per_s(sum(meets_slos(o, slos) for o in ok)) if slos else None
    return Metrics(
        completed=len(ok),
        failed=len(outputs) - len(ok),
        duration_s=duration_s,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=per_s(len(ok)),
        output_throughput=per_s(total_out),
        total_token_throughput=per_s(total_in + total_out),
        goodput=good,
        ttft_ms=Distribution.of_seconds([o.ttft_s for o in ok if o.ttft_s is not None]),
        tpot_ms=Distribution.of_seconds([t for o in ok if (t := o.tpot_s) is not None]),
        itl_ms=Distribution.of_seconds([gap for o in ok for gap in o.itl_s]),
        e2el_ms=Distribution.of_seconds([o.e2e_s for o in ok]),
    )
