"""Hop comparisons keep only the rounds no target lost to CPU steal, when two or more, and pair figures per round."""

from __future__ import annotations

from typing import Any

import pytest

from genmesh.bench.compare import compare_hop, keep_quiet, ratio


def _batch(steal: float | None, tok_s: float, ttfts: list[float] | None = None) -> dict[str, Any]:
    ttfts = [100.0] if ttfts is None else ttfts
    batch = {"steal_percent": steal, "output_throughput": tok_s, "duration_s": 1.0, "total_output_tokens": tok_s}
    return batch | {"ttfts_ms": ttfts, "failed": 0}


def test_a_round_with_steal_in_any_target_is_dropped() -> None:
    batches = {
        "microservice": [_batch(18.8, 250), _batch(0.6, 360), _batch(0.7, 370), _batch(31.3, 190)],
        "engine": [_batch(2.1, 350), _batch(0.3, 370), _batch(9.0, 365), _batch(0.3, 371)],
    }
    kept = keep_quiet(batches, 5.0)
    assert kept.rounds == [1, 2, 3, 4]  # only one quiet round: every round is kept
    assert kept.basis.startswith("all 4 rounds")
    batches["engine"][2] = _batch(1.0, 365)
    kept = keep_quiet(batches, 5.0)
    assert kept.rounds == [2, 3]
    assert [b["output_throughput"] for b in kept.of(batches["microservice"])] == [360, 370]
    assert kept.basis == "2 quiet rounds of 4 (steal <= 5% in every batch)"
    assert keep_quiet({"queue": batches["microservice"]}, noun="passes").basis == "2 quiet passes of 4 (steal <= 5%)"


def test_unknown_steal_is_not_quiet() -> None:
    batches = {"a": [_batch(None, 1), _batch(1.0, 1), _batch(1.0, 1)], "b": [_batch(1.0, 1)] * 3}
    assert keep_quiet(batches).rounds == [2, 3]


def test_the_hop_is_compared_with_the_engine_within_each_round() -> None:
    hop = [_batch(1.0, 300, [100.0, 300.0, 200.0]), _batch(1.0, 90, [50.0]), _batch(1.0, 100, [])]
    direct = [_batch(1.0, 300, [150.0, 190.0, 170.0]), _batch(1.0, 100, [60.0]), _batch(1.0, 0, [1.0])]
    s = compare_hop(
        {"gateway": hop, "engine": direct}, "gateway", {"gateway": [12.0, 14.0], "engine": [10.0]}, (0.95, 10)
    )
    assert s["added_ttft_ms_p50_per_round"] == [30.0, -10.0, None]  # p50 200 - 170, 50 - 60, no first token
    assert s["throughput_ratio_per_round"] == [1.0, 0.9, None]
    assert s["throughput_ratio"] == pytest.approx(490 / 400)
    assert s["gateway"]["tokens_per_s"] == pytest.approx(490 / 3)
    assert s["added_idle_ttft_ms_p50"] == 3.0
    assert s["targets_met"] == {"throughput_ratio": True, "added_ttft_ms_p50": True, "added_idle_ttft_ms_p50": True}


def test_ratio_of_missing_or_zero_is_none() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None
    assert ratio(3.0, 0.0) is None
