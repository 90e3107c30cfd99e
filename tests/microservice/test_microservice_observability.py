"""What operators see: Prometheus metrics, cached readiness, and JSON logs carrying the request id."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from prometheus_client.parser import text_string_to_metric_families

from support.polling import wait_until
from support.servers import GENMESH_ENGINE_ONLY, Server

CHAT = "/v1/chat/completions"
REQUESTS = "genmesh_microservice_requests_total"


def sample(base_url: str, name: str, **labels: str) -> float:
    """One sample of a /metrics page, matched by name and labels (0 when absent)."""
    text = httpx.get(base_url + "/metrics").text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def test_requests_are_counted_by_status_and_timed(microservice_url: str) -> None:
    ok_before = sample(microservice_url, REQUESTS, endpoint=CHAT, status="200")
    bad_before = sample(microservice_url, REQUESTS, endpoint=CHAT, status="400")
    timed_before = sample(microservice_url, "genmesh_microservice_request_duration_seconds_count", endpoint=CHAT)
    assert httpx.post(microservice_url + CHAT, json={"messages": "hi", "max_tokens": 2}).status_code == 200
    assert httpx.post(microservice_url + CHAT, json={"messages": []}).status_code == 400
    assert sample(microservice_url, REQUESTS, endpoint=CHAT, status="200") == ok_before + 1
    assert sample(microservice_url, REQUESTS, endpoint=CHAT, status="400") == bad_before + 1
    timed = sample(microservice_url, "genmesh_microservice_request_duration_seconds_count", endpoint=CHAT)
    assert timed == timed_before + 2
    assert sample(microservice_url, "genmesh_microservice_requests_in_flight") == 0


def test_streams_record_time_to_first_token(microservice_url: str) -> None:
    name = "genmesh_microservice_time_to_first_token_seconds_count"
    before = sample(microservice_url, name, endpoint=CHAT)
    body = {"messages": "Hello", "max_tokens": 4, "ignore_eos": True, "stream": True}
    r = httpx.post(microservice_url + CHAT, json=body, timeout=60)
    assert r.status_code == 200
    assert sample(microservice_url, name, endpoint=CHAT) == before + 1
    first_token_sum = sample(microservice_url, "genmesh_microservice_time_to_first_token_seconds_sum", endpoint=CHAT)
    assert first_token_sum > 0


def test_a_stream_is_counted_timed_and_carries_its_request_id(microservice_url: str) -> None:
    """A stream's body goes around the middleware (``EventStream``); its start still goes through it."""
    ok_before = sample(microservice_url, REQUESTS, endpoint=CHAT, status="200")
    timed_before = sample(microservice_url, "genmesh_microservice_request_duration_seconds_count", endpoint=CHAT)
    body = {"messages": "Hello", "max_tokens": 6, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", microservice_url + CHAT, json=body, headers={"X-Request-ID": "stream-rid-7"}) as r:
        assert r.status_code == 200
        assert r.headers["x-request-id"] == "stream-rid-7"
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert len(events) >= 7  # the role, six tokens (maybe more chunks), [DONE]
    assert sample(microservice_url, REQUESTS, endpoint=CHAT, status="200") == ok_before + 1
    timed = sample(microservice_url, "genmesh_microservice_request_duration_seconds_count", endpoint=CHAT)
    assert timed == timed_before + 1
    assert sample(microservice_url, "genmesh_microservice_requests_in_flight") == 0


@GENMESH_ENGINE_ONLY
def test_a_flood_of_readiness_probes_is_not_a_flood_on_the_engine(microservice_url: str) -> None:
    name = "genmesh_microservice_readiness_checks_total"
    before = sample(microservice_url, name, result="ready")
    started = time.monotonic()
    with httpx.Client() as client, ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda _: client.get(microservice_url + "/v1/ready"), range(64)))
    elapsed = time.monotonic() - started
    assert {r.status_code for r in replies} == {200}
    assert {r.json()["engine"]["status"] for r in replies} == {"ok"}
    engine_calls = sample(microservice_url, name, result="ready") - before
    # One engine call per 1.5 s window at most (the first window may have opened before the flood).
    assert 0 <= engine_calls <= 1 + int(elapsed / 1.5) + 1
    assert engine_calls < len(replies) / 4


def test_logs_are_json_lines_with_the_request_id(microservice_server: Server) -> None:
    rid = f"log-check-{time.monotonic_ns()}"
    r = httpx.post(
        microservice_server.url + CHAT, json={"messages": "hi", "max_tokens": 2}, headers={"X-Request-ID": rid}
    )
    assert r.status_code == 200

    def access_line() -> dict[str, object] | None:
        for line in microservice_server.log_path.read_text().splitlines():
            if rid in line:
                record: dict[str, object] = json.loads(line)
                return record
        return None

    wait_until(lambda: access_line() is not None, 5, what="the access log line")
    record = access_line()
    assert record is not None
    assert record["request_id"] == rid
    assert record["name"] == "genmesh.microservice.access"
    assert record["status"] == 200
    assert record["path"] == CHAT
    assert {"time", "level", "message", "duration_ms"} <= set(record)
