"""bench-engine's verdict: judged on the runs the hypervisor left alone (low steal) when there are two."""

from __future__ import annotations

import pytest

from genmesh.bench.engine import summary
from genmesh.bench.results import Result


def _side(tok_s: float, steal: float, round_: int, **extra: float) -> Result:
    return {"output_throughput": tok_s, "steal_percent": steal, "other_percent": 0.0, "round": round_} | extra


def _rounds(*runs: tuple[float, float, float]) -> dict[str, list[Result]]:
    """(HTTP tok/s, HTTP steal %, in-process steal %) per run; the in-process side always gives 400 tok/s."""
    http = [
        _side(tok_s, steal, i, median_ttft_ms=900.0, p99_ttft_ms=1500.0, health_p50_ms=2.0, health_p99_ms=20.0)
        | {"order": ["http", "in-process"]}
        for i, (tok_s, steal, _) in enumerate(runs, 1)
    ]
    return {"http": http, "in-process": [_side(400.0, steal, i) for i, (_, _, steal) in enumerate(runs, 1)]}


def test_targets_are_judged_on_the_quiet_runs_when_two_or_more() -> None:
    rounds = _rounds((300.0, 12.0, 1.0), (380.0, 1.0, 1.0), (372.0, 2.0, 1.0), (250.0, 1.0, 30.0))
    s = summary(rounds, 5.0, 32)
    assert s["median_quiet"]["ratio"] == pytest.approx((0.95 + 0.93) / 2)
    assert s["median"]["ratio"] == pytest.approx((0.75 + 0.93) / 2)
    assert [run["quiet"] for run in s["runs"]] == [False, True, True, False]
    assert "2 quiet runs of 4" in s["verdicts"][0]
    assert s["verdicts"][1] == "target HTTP/in-process >= 0.90 at 32 streams: 0.940 PASS"
    assert s["verdicts"][2].endswith("20.0 ms PASS")
    assert s["targets"]["ratio_met"] is True
    table = s["table"].splitlines()
    assert len(table) == 2 + 4 + 2  # header, rule, four runs, the medians of all and of the quiet runs
    assert table[-1].split()[:2] == ["median", "quiet"]
    assert table[2].split()[:5] == ["1", "http/in-process", "300.0", "400.0", "0.750"]


def test_fewer_than_two_quiet_runs_fall_back_to_all_runs() -> None:
    s = summary(_rounds((300.0, 12.0, 1.0), (340.0, 1.0, 1.0)), 5.0, 32)
    assert s["median_quiet"] is None
    assert "all 2 runs" in s["verdicts"][0]
    assert s["verdicts"][1].endswith("0.800 FAIL")
    assert s["targets"]["ratio_met"] is False
    assert s["table"].splitlines()[-1].split()[:2] == ["median", "all"]
