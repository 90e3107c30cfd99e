"""bench-engine's verdict: judged on the runs the hypervisor left alone (low steal) when there are two."""

from __future__ import annotations

import pytest

from genmesh.bench.engine import HttpResult, RunResult, render_table, summary_of, verdicts
from genmesh.bench.inprocess import InProcessResult


def _run(i: int, http_tok_s: float, steal_http: float, steal_inproc: float = 1.0) -> RunResult:
    http = HttpResult(
        wall_s=1.0,
        completion_tokens=int(http_tok_s),
        tokens_per_s=http_tok_s,
        ttft_p50_ms=900.0,
        ttft_p99_ms=1500.0,
        e2e_p50_ms=10_000.0,
        health_p50_ms=2.0,
        health_p99_ms=20.0,
        health_max_ms=30.0,
        health_polls=500,
        health_failures=0,
        errors=[],
        steal_percent=steal_http,
        busy_percent=90.0,
        other_percent=0.0,
    )
    inproc = InProcessResult(load_s=7.0, wall_s=1.0, completion_tokens=400, steal_percent=steal_inproc,
                             busy_percent=99.0, other_percent=0.0)  # fmt: skip
    return RunResult(i, ["http", "in-process"], http, inproc)


def test_targets_are_judged_on_the_quiet_runs_when_two_or_more() -> None:
    runs = [_run(1, 300.0, steal_http=12.0), _run(2, 380.0, 1.0), _run(3, 372.0, 2.0), _run(4, 250.0, 1.0, 30.0)]
    summary = summary_of(runs, max_steal_pct=5.0)
    assert summary.quiet_count == 2
    assert summary.judged["ratio"] == pytest.approx((0.95 + 0.93) / 2)
    assert summary.all_runs["ratio"] == pytest.approx((0.75 + 0.93) / 2)
    lines = verdicts(summary, 32)
    assert "2 quiet runs" in lines[0]
    assert lines[1].endswith("0.940 PASS")
    assert "quiet" in render_table(runs, summary).splitlines()[-1]


def test_fewer_than_two_quiet_runs_fall_back_to_all_runs() -> None:
    runs = [_run(1, 300.0, steal_http=12.0), _run(2, 340.0, 1.0)]
    summary = summary_of(runs, max_steal_pct=5.0)
    assert summary.quiet_runs is None
    assert summary.judged is summary.all_runs
    lines = verdicts(summary, 32)
    assert "all runs" in lines[0]
    assert lines[1].endswith("0.800 FAIL")
