"""Batch fairness end to end (the real engine, a real Redis): tenants share the runner round robin, a
rate-limited tenant's lines give their slots back while they wait, a key's batches in progress are
capped, cancel gives back lines waiting in admission, and a replica lends only the batches of models
it routes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.batches import chat_line, client, create_key, read_lines, submit, wait_for
from support.gateway_helpers import ADMIN_KEY, RedisServer, counter, private_redis, upstream_name
from support.servers import MODEL_NAME


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from private_redis(tmp_path_factory)  # the session's gateways would claim these lines


FLAGS = ("--auth", "on", "--batch-lease-ttl-s", "3", "--batch-poll-interval-s", "0.2", "--batch-slot-share", "1")


def _models(engine_url: str, slots: int = 8, name: str = MODEL_NAME) -> dict[str, Any]:
    return {name: {"upstreams": [{"url": engine_url, "max_concurrency": slots}], "max_queue_wait_s": 120}}


def _metrics(url: str) -> str:
    return httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10).text


def test_a_rate_limited_tenant_leaves_the_runner_to_the_others(start_gateway: Any, engine_url: str) -> None:
    # two runner slots; one tenant may send one request a minute. Its lines used to sleep in the runner's
    # slots until the minute turned, and the other tenant's batch waited behind them
    gw = start_gateway(_models(engine_url), *FLAGS, "--batch-concurrency", "2")
    slow_secret, _ = create_key(gw.url, "slow", rpm=1)
    fast_secret, _ = create_key(gw.url, "fast")
    slow, fast = client(gw.url, slow_secret), client(gw.url, fast_secret)
    slow_batch = submit(slow, [chat_line(f"s{i}") for i in range(6)])
    fast_batches = [submit(fast, [chat_line(f"f{b}-{i}") for i in range(4)]) for b in range(2)]
    for batch in fast_batches:  # well within the minute the slow key waits for
        done = wait_for(fast, batch.id, 45)
        assert done.status == "completed", done
        assert (done.request_counts.completed, done.request_counts.failed) == (4, 0)
    counts = slow.batches.retrieve(slow_batch.id).request_counts
    assert counts.completed <= 2  # one per RPM window (the window may have turned once)
    assert counts.failed == 0
    cancelled = slow.batches.cancel(slow_batch.id)
    assert wait_for(slow, cancelled.id, 30).status == "cancelled"


def test_active_batches_are_capped_and_cancel_frees_a_line_waiting_in_admission(
    start_gateway: Any, engine_url: str
) -> None:
    # one slot, held by a long interactive request: the batch's line takes its batch slot and waits in
    # admission; cancelling gives it back at once (before the interactive request ends)
    flags = (*FLAGS, "--batch-max-active-per-key", "1", "--no-batch-preempt")
    gw = start_gateway(_models(engine_url, slots=1), *flags)
    secret, _ = create_key(gw.url, "capped")
    sdk = client(gw.url, secret)
    # a long stream that the test stops reading (and closes) once it has seen what it needs
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Count."}], "max_tokens": 2048}
    body |= {"ignore_eos": True, "stream": True}
    stop, finished, status = threading.Event(), threading.Event(), []

    def interactive() -> None:
        headers = {"Authorization": f"Bearer {secret}"}
        with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, headers=headers, timeout=300) as r:
            status.append(r.status_code)
            for line in r.iter_lines():
                if stop.is_set():
                    return
                if line.strip() == "data: [DONE]":
                    finished.set()

    thread = threading.Thread(target=interactive)
    thread.start()
    try:
        deadline, upstream = time.monotonic() + 60, upstream_name(engine_url)
        while counter(_metrics(gw.url), "genmesh_gateway_upstream_in_flight", model=MODEL_NAME, upstream=upstream) < 1:
            assert time.monotonic() < deadline, "the interactive request never started"
            time.sleep(0.05)
        batch = submit(sdk, [chat_line(f"c{i}") for i in range(3)])
        # the key's one batch in progress: a second is refused before its lines are copied in
        r = httpx.post(
            gw.url + "/v1/batches",
            json={"input_file_id": batch.input_file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"},
            headers={"Authorization": f"Bearer {secret}"},
            timeout=30,
        )
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "quota_exceeded"
        assert "--batch-max-active-per-key 1" in r.json()["error"]["message"]
        assert int(r.headers["Retry-After"]) >= 1
        deadline = time.monotonic() + 30
        metric = "genmesh_gateway_queue_depth_by_kind"
        while counter(_metrics(gw.url), metric, kind="batch", model=MODEL_NAME) < 1:
            assert time.monotonic() < deadline, "no batch line waited in admission"
            time.sleep(0.05)
        sdk.batches.cancel(batch.id)
        done = wait_for(sdk, batch.id, 30)
        assert done.status == "cancelled", done
        assert not finished.is_set(), "the interactive request ended first: the test proves nothing"
        assert done.request_counts.completed == 0
        assert counter(_metrics(gw.url), metric, kind="batch", model=MODEL_NAME) == 0
        again = submit(sdk, [chat_line("after")])  # the cancelled batch no longer counts
        assert again.status in ("validating", "in_progress")
    finally:
        stop.set()
        thread.join(300)
    assert status == [200]


def test_a_replica_leaves_lines_of_models_it_does_not_route(start_gateway: Any, engine_url: str) -> None:
    # one Redis, two route sets: the replica without the model never claims its lines (it would fail
    # them with a 404); the one that routes it runs them all
    other = start_gateway(_models(engine_url, name="another-model"), *FLAGS)
    serving = start_gateway(_models(engine_url), *FLAGS)
    secret, _ = create_key(other.url, "split")
    sdk = client(other.url, secret)  # created through the replica that does not route the model
    ids = [f"r{i}" for i in range(8)]
    batch = submit(sdk, [chat_line(i) for i in ids])
    done = wait_for(client(serving.url, secret), batch.id, 120)
    assert done.status == "completed", done
    assert (done.request_counts.completed, done.request_counts.failed) == (8, 0)
    assert sorted(o["custom_id"] for o in read_lines(sdk, done.output_file_id)) == sorted(ids)
