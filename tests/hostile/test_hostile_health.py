"""Runs last among the hostile tests (conftest): /health at every hop stayed fast throughout."""

from __future__ import annotations

import json
import statistics
from typing import Any

from support.hostile import STARTED, record

P99_LIMIT_MS = 50.0


def test_health_stayed_fast_during_the_suite(hostile: object) -> None:
    mesh = hostile
    assert mesh.probe.stdin is not None  # type: ignore[attr-defined]
    mesh.probe.stdin.close()  # type: ignore[attr-defined]
    assert mesh.probe.wait(30) == 0  # type: ignore[attr-defined]
    data = json.loads(mesh.probe_out.read_text())  # type: ignore[attr-defined]
    slow = []
    for hop, samples in data["latencies_ms"].items():
        assert len(samples) >= 50, (hop, len(samples))
        p99 = statistics.quantiles(samples, n=100)[98]
        record("/health p99 ms during the suite", hop, p99, f"< {P99_LIMIT_MS:g}")
        record("/health probes", hop, len(samples))
        assert data["failures"][hop] == 0, (hop, data["failures"][hop])
        if p99 >= P99_LIMIT_MS:
            slow.append(f"{hop}: p99 {p99:.1f} ms over {len(samples)} probes")
    assert not slow, [*slow, *_blame(data["slow"])]


def _blame(samples: list[list[Any]]) -> list[str]:
    """Each slow probe with the test that was running when it was made."""
    out = []
    for at, name, ms in samples:
        running = [test for began, test in STARTED if began <= at]
        out.append(f"{name} {ms:.0f} ms during {running[-1] if running else 'set-up'}")
    return out
