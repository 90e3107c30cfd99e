"""vLLM's serving metrics from request outputs: throughput, TTFT, TPOT, ITL, E2E, goodput."""

from __future__ import annotations

import pytest

from genmesh.bench.client import RequestOutput
from genmesh.bench.stats import Distribution, parse_goodput, percentile, summarize


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


def test_summary_counts_throughput_and_distributions() -> None:
    outputs = [
        out(0.1, 1.1, 11, itl=[0.1] * 10),
        out(0.3, 2.3, 21, itl=[0.1] * 20),
        RequestOutput(success=False, e2e_s=0.5, error="boom"),
    ]
    m = summarize(outputs, duration_s=4.0)
    assert (m.completed, m.failed) == (2, 1)
    assert m.total_output_tokens == 32
    assert m.total_input_tokens == 20
    assert m.output_throughput == pytest.approx(8.0)
    assert m.request_throughput == pytest.approx(0.5)
    assert m.total_token_throughput == pytest.approx(13.0)
    assert m.ttft_ms.mean == pytest.approx(200.0)
    assert m.ttft_ms.median == pytest.approx(200.0)
    assert m.tpot_ms.mean == pytest.approx(100.0)
    assert m.itl_ms.count == 30
    assert m.itl_ms.p99 == pytest.approx(100.0)
    assert m.e2el_ms.p90 == pytest.approx(1100 + 0.9 * 1200)
    assert m.goodput is None


def test_goodput_counts_requests_meeting_every_slo() -> None:
    outputs = [out(0.1, 1.1, 11), out(0.3, 2.3, 21), out(0.1, 5.1, 11)]  # TPOTs 100, 100, 500 ms
    assert summarize(outputs, 2.0, {"ttft": 200.0}).goodput == pytest.approx(1.0)
    assert summarize(outputs, 2.0, {"ttft": 200.0, "tpot": 150.0}).goodput == pytest.approx(0.5)
    assert summarize(outputs, 2.0, {"e2el": 3000.0}).goodput == pytest.approx(1.0)


def test_parse_goodput() -> None:
    assert parse_goodput(["ttft:500", "tpot:50.5"]) == {"ttft": 500.0, "tpot": 50.5}
    with pytest.raises(ValueError, match="KEY:MS"):
        parse_goodput(["latency:5"])
    with pytest.raises(ValueError, match="positive"):
        parse_goodput(["ttft:0"])


def test_empty_distribution() -> None:
    assert Distribution.of_seconds([]) == Distribution(None, None, None, None, None, 0)
