"""Hop comparisons (microservice, gateway) keep only the rounds no target lost to CPU steal, when two or more."""

from __future__ import annotations

from typing import Any

from genmesh.bench.rounds import quiet_rounds, round_ttft_diffs


def _batch(steal: float | None, tok_s: float) -> dict[str, Any]:
    return {"steal_percent": steal, "output_throughput": tok_s}


def test_a_round_with_steal_in_any_target_is_dropped() -> None:
    batches = {
        "microservice": [_batch(18.8, 250), _batch(0.6, 360), _batch(0.7, 370), _batch(31.3, 190)],
        "engine": [_batch(2.1, 350), _batch(0.3, 370), _batch(9.0, 365), _batch(0.3, 371)],
    }
    kept = quiet_rounds(batches, 5.0)
    assert kept.rounds == [1, 2, 3, 4]  # only one quiet round: every round is kept
    assert kept.basis.startswith("all 4 rounds")
    batches["engine"][2] = _batch(1.0, 365)
    kept = quiet_rounds(batches, 5.0)
    assert kept.rounds == [2, 3]
    assert [b["output_throughput"] for b in kept.batches["microservice"]] == [360, 370]
    assert [b["output_throughput"] for b in kept.batches["engine"]] == [370, 365]
    assert kept.basis.startswith("2 quiet rounds of 4")


def test_unknown_steal_is_not_quiet() -> None:
    batches = {"a": [_batch(None, 1), _batch(1.0, 1), _batch(1.0, 1)], "b": [_batch(1.0, 1)] * 3}
    assert quiet_rounds(batches).rounds == [2, 3]


def test_added_ttft_is_paired_within_each_round() -> None:
    hop = [{"ttfts_ms": [100.0, 300.0, 200.0]}, {"ttfts_ms": [50.0]}, {"ttfts_ms": []}]
    direct = [{"ttfts_ms": [150.0, 190.0, 170.0]}, {"ttfts_ms": [60.0]}, {"ttfts_ms": [1.0]}]
    assert round_ttft_diffs(hop, direct) == [30.0, -10.0, None]  # p50 200 - 170, 50 - 60, no first token
