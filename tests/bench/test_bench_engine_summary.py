"""bench-engine's verdict: judged on the runs the hypervisor left alone (low steal) when there are two."""

from __future__ import annotations

import pytest

from genmesh.bench.engine import summary
from genmesh.bench.results import Result


def _side(tok_s: float, steal: float, **extra: float) -> Result:
    batch = {"output_throughput": tok_s, "total_output_tokens": tok_s, "duration_s": 1.0, "steal_percent": steal}
    return batch | {"failed": 0, "ttfts_ms": []} | extra


def _rounds(*runs: tuple[float, ...]) -> dict[str, list[Result]]:
    """(HTTP tok/s, HTTP steal %, in-process steal %, /health p99 ms) per run; in-process gives 400 tok/s."""
    http = [_side(tok_s, steal, health_p99_ms=health) for tok_s, steal, _, health in runs]
    return {"http": http, "in-process": [_side(400.0, steal) for _, _, steal, _ in runs]}


def test_targets_are_judged_on_the_quiet_runs_when_two_or_more() -> None:
    rounds = _rounds((300, 12, 1, 90), (380, 1, 1, 20), (372, 2, 1, 30), (250, 1, 30, 5))
    s = summary(rounds, 5.0)
    assert s["rounds_kept"] == [2, 3]
    assert "2 quiet rounds of 4" in s["judged_on"]
    assert s["throughput_ratio"] == pytest.approx((380 + 372) / 800, abs=1e-3)
    assert s["throughput_ratio_per_round"] == [0.95, 0.93]
    assert s["health_p99_ms"] == 25.0  # the median over the kept rounds: the noisy 90 ms and 5 ms are not
    assert s["targets_met"] == {"throughput_ratio": True, "health_p99_ms": True}


def test_fewer_than_two_quiet_runs_fall_back_to_all_runs() -> None:
    s = summary(_rounds((300, 12, 1, 60), (340, 1, 1, 70)), 5.0)
    assert "all 2 rounds" in s["judged_on"]
    assert s["throughput_ratio"] == pytest.approx(0.8)
    assert s["targets_met"] == {"throughput_ratio": False, "health_p99_ms": False}
