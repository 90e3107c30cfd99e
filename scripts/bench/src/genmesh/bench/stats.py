"""Summary statistics for latency samples."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np


def percentile(samples: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100, linear interpolation), ``None`` for no samples."""
    if not samples:
        return None
    return float(np.percentile(np.asarray(samples, dtype=np.float64), q))


def median(values: Sequence[float | None]) -> float | None:
    """Median of the values that are not ``None``."""
    present = [v for v in values if v is not None]
    return float(statistics.median(present)) if present else None
