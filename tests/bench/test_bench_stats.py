"""vLLM's serving metrics in a run's result: throughput, TTFT, TPOT, ITL, E2E, goodput, CPU steal."""

from __future__ import annotations

import os

import pytest

from genmesh.bench.results import Load, RequestOutput, StealMeter, make_result, parse_goodput, percentile


def out(ttft: float, e2e: float, tokens: int, itl: list[float] | None = None, prompt: int = 10) -> RequestOutput:
    return RequestOutput(
        success=True, prompt_tokens=prompt, output_tokens=tokens, ttft_s=ttft, itl_s=itl or [], e2e_s=e2e
    )


def test_percentile_interpolates_and_handles_empty() -> None:
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([float(i) for i in range(101)], 99) == pytest.approx(99.0)


def test_tpot_excludes_the_first_token() -> None:
    assert out(0.1, 1.1, 11).tpot_s == pytest.approx(0.1)
    assert out(0.1, 0.1, 1).tpot_s is None
    assert RequestOutput(success=False, ttft_s=0.1, e2e_s=1.0, output_tokens=5).tpot_s is None


def test_result_counts_throughput_and_distributions() -> None:
    outputs = [
        out(0.1, 1.1, 11, itl=[0.1] * 10),
        out(0.3, 2.3, 21, itl=[0.1] * 20),
        RequestOutput(success=False, e2e_s=0.5, error="boom"),
    ]
    r = make_result("run", Load(4.0, outputs), None, settings={"target": "engine"})
    assert (r["label"], r["target"], r["completed"], r["failed"], r["errors"]) == ("run", "engine", 2, 1, ["boom"])
    assert (r["total_output_tokens"], r["total_input_tokens"]) == (32, 20)
    assert r["output_throughput"] == pytest.approx(8.0)
    assert r["request_throughput"] == pytest.approx(0.5)
    assert r["total_token_throughput"] == pytest.approx(13.0)
    assert r["mean_ttft_ms"] == pytest.approx(200.0)
    assert r["median_ttft_ms"] == pytest.approx(200.0)
    assert r["std_ttft_ms"] == pytest.approx(100.0)
    assert r["mean_tpot_ms"] == pytest.approx(100.0)
    assert r["p99_itl_ms"] == pytest.approx(100.0)
    assert r["p90_e2el_ms"] == pytest.approx(1100 + 0.9 * 1200)
    assert r["ttfts_ms"] == pytest.approx([100.0, 300.0])
    assert r["goodput"] is None
    assert r["steal_percent"] is None
    assert r["high_steal"] is False


def test_a_run_without_timed_requests_gives_its_counts() -> None:
    r = make_result("in-process", Load(2.0, []), None, completed=4, output_tokens=100)
    assert (r["completed"], r["failed"], r["output_throughput"], r["request_throughput"]) == (4, 0, 50.0, 2.0)
    assert r["mean_ttft_ms"] is None
    assert r["ttfts_ms"] == []


def test_goodput_counts_requests_meeting_every_slo() -> None:
    outputs = [out(0.1, 1.1, 11), out(0.3, 2.3, 21), out(0.1, 5.1, 11)]  # TPOTs 100, 100, 500 ms
    assert make_result("g", Load(2.0, outputs), None, slos={"ttft": 200.0})["goodput"] == pytest.approx(1.0)
    slos = {"ttft": 200.0, "tpot": 150.0}
    assert make_result("g", Load(2.0, outputs), None, slos=slos)["goodput"] == pytest.approx(0.5)
    assert make_result("g", Load(2.0, outputs), None, slos={"e2el": 3000.0})["goodput"] == pytest.approx(1.0)


def test_parse_goodput() -> None:
    assert parse_goodput(["ttft:500", "tpot:50.5"]) == {"ttft": 500.0, "tpot": 50.5}
    with pytest.raises(ValueError, match="KEY:MS"):
        parse_goodput(["latency:5"])
    with pytest.raises(ValueError, match="positive"):
        parse_goodput(["ttft:0"])


def test_steal_meter_counts_its_own_process_as_measured() -> None:
    with StealMeter([os.getpid()]) as meter:
        sum(i * i for i in range(3_000_000))  # busy CPU in the measured process itself
    assert meter.steal_percent is not None
    assert meter.busy_percent is not None
    assert meter.other_percent is not None
    assert 0.0 <= meter.steal_percent <= 100.0
    assert 0.0 <= meter.other_percent <= meter.busy_percent <= 100.0
