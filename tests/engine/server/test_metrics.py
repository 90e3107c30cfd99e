"""/metrics: the gauges of DESIGN.md plus counters and latency histograms that move with traffic."""

from __future__ import annotations

import httpx

from support.servers import metric_value


def test_metrics_move_with_a_request(engine_url: str) -> None:
    names = [
        "genmesh_engine_requests_running",
        "genmesh_engine_requests_waiting",
        "genmesh_engine_kv_cache_usage_ratio",
    ]
    for name in names:
        assert metric_value(engine_url, name) >= 0
    before_tokens = metric_value(engine_url, "genmesh_engine_generation_tokens_total")
    before_ttft = metric_value(engine_url, "genmesh_engine_time_to_first_token_seconds_count")
    before_e2e = metric_value(engine_url, "genmesh_engine_e2e_request_latency_seconds_count")
    r = httpx.post(
        engine_url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 8, "ignore_eos": True}, timeout=60
    )
    assert r.status_code == 200
    assert metric_value(engine_url, "genmesh_engine_generation_tokens_total") == before_tokens + 8
    assert metric_value(engine_url, "genmesh_engine_time_to_first_token_seconds_count") == before_ttft + 1
    assert metric_value(engine_url, "genmesh_engine_e2e_request_latency_seconds_count") == before_e2e + 1
    text = httpx.get(engine_url + "/metrics").text
    assert "genmesh_engine_time_per_output_token_seconds_bucket" in text
    labels = 'endpoint="completions",finish_reason="length",model="SmolLM2-135M-Instruct"'
    assert f"genmesh_engine_requests_total{{{labels}}}" in text
