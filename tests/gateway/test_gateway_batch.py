"""The Batch API end to end: the openai SDK -> gateway (Files, Batches, runner) -> the real engine,
on a real Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion

from support.aof_redis import AofRedis
from support.batches import chat_line, client, create_key, jsonl, read_lines, submit, usage, wait_done, wait_for
from support.gateway_helpers import ADMIN_KEY, RedisServer, counter, private_redis, upstream_name
from support.servers import MODEL_NAME


# A Redis of this module's own. The session's shared gateways (``shared_gateway``, the embeddings mesh's) live
# on the session Redis for the whole run, and every gateway runs a batch runner and publishes console activity:
# there they would claim this module's batch lines (and fail them: they route other models) and count as
# replicas on the console.
@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from private_redis(tmp_path_factory)


BATCH_FLAGS = ("--batch-lease-ttl-s", "3", "--batch-poll-interval-s", "0.2")


def _models(engine_url: str, slots: int = 8) -> dict[str, Any]:
    return {MODEL_NAME: {"upstreams": [{"url": engine_url, "max_concurrency": slots}], "max_queue_wait_s": 120}}


@pytest.fixture
def gateway(start_gateway: Any, engine_url: str) -> Any:
    return start_gateway(_models(engine_url), "--auth", "on", *BATCH_FLAGS, "--batch-slot-share", "1")


def _metrics(url: str) -> str:
    return httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10).text


def until_metric(url: str, name: str, at_least: float, timeout_s: float = 60) -> float:
    """Poll one model-labelled gauge until it reaches ``at_least``; its value then."""
    deadline = time.monotonic() + timeout_s
    while (value := counter(_metrics(url), name, model=MODEL_NAME)) < at_least:
        assert time.monotonic() < deadline, f"{name} stayed below {at_least}"
        time.sleep(0.05)
    return value


def _every_batch_key_has_a_ttl(redis: Any) -> None:
    keys = [k.decode() for k in redis.scan_iter("genmesh:gw:*", count=1000)]
    ours = [k for k in keys if any(part in k for part in (":file", ":batch"))]
    assert any(k.endswith(":results") for k in ours)
    assert any(k.endswith(":leases") for k in ours)
    assert [k for k in ours if redis.pttl(k) < 0] == []


def test_sdk_batch_of_200_chat_lines(gateway: Any, redis_server: Any) -> None:
    secret, key_id = create_key(gateway.url, "batcher")
    other, _ = create_key(gateway.url, "other")
    sdk = client(gateway.url, secret)
    lines = [chat_line(f"req-{i}", f"Say the number {i}.", max_tokens=4) for i in range(200)]
    f = sdk.files.create(file=("input.jsonl", jsonl(lines)), purpose="batch")
    assert f.purpose == "batch"
    assert f.bytes == len(jsonl(lines))
    assert f.filename == "input.jsonl"
    batch = sdk.batches.create(
        input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"job": "t"}
    )
    assert batch.status == "in_progress"
    assert batch.request_counts is not None
    assert batch.request_counts.total == 200
    assert batch.metadata == {"job": "t"}
    assert until_metric(gateway.url, "genmesh_gateway_batch_lines_queued", 1) <= 200
    running = until_metric(gateway.url, "genmesh_gateway_batch_lines_running", 1)
    assert 1 <= running <= 8  # at most the model's slots (share 1)
    mid = wait_done(sdk, batch.id, 1, 120)
    assert mid.status in ("in_progress", "finalizing", "completed")
    _every_batch_key_has_a_ttl(redis_server.client())
    done = wait_for(sdk, batch.id, 300)
    assert done.status == "completed", done
    assert done.request_counts.completed == 200
    assert done.request_counts.failed == 0
    assert done.completed_at
    assert done.in_progress_at
    assert done.finalizing_at
    assert done.error_file_id is None
    out = read_lines(sdk, done.output_file_id)
    assert sorted(o["custom_id"] for o in out) == sorted(f"req-{i}" for i in range(200))
    for o in out:
        assert o["response"]["status_code"] == 200
        assert o["error"] is None
        assert o["id"].startswith("batch_req_")
        reply = ChatCompletion.model_validate(o["response"]["body"])
        assert reply.usage is not None
        assert 1 <= reply.usage.completion_tokens <= 4
    output = sdk.files.retrieve(done.output_file_id)
    assert output.purpose == "batch_output"
    assert [b.id for b in sdk.batches.list(limit=5).data] == [batch.id]
    assert [x.id for x in sdk.files.list(purpose="batch").data] == [f.id]

    # metered as the key's own requests
    used = usage(gateway.url, key_id)
    assert used["requests"] == 200
    assert used["completion_tokens"] == sum(o["response"]["body"]["usage"]["completion_tokens"] for o in out)
    metrics = _metrics(gateway.url)
    assert counter(metrics, "genmesh_gateway_batch_lines_total", model=MODEL_NAME, outcome="completed") == 200
    for kind in ("interactive", "batch"):
        assert f'genmesh_gateway_queue_depth_by_kind{{kind="{kind}",model="{MODEL_NAME}"}} 0.0' in metrics
    assert f'genmesh_gateway_batch_lines_queued{{model="{MODEL_NAME}"}} 0.0' in metrics

    # another key sees none of it
    stranger = client(gateway.url, other)
    for call in (
        lambda: stranger.batches.retrieve(batch.id),
        lambda: stranger.files.retrieve(f.id),
        lambda: stranger.files.content(done.output_file_id),
        lambda: stranger.batches.cancel(batch.id),
        lambda: stranger.files.delete(f.id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert stranger.batches.list().data == []
    assert stranger.files.list().data == []
    with pytest.raises(openai.NotFoundError) as exc:
        stranger.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert exc.value.body["param"] == "input_file_id"  # type: ignore[index]
    assert sdk.files.delete(f.id).deleted
    with pytest.raises(openai.NotFoundError):
        sdk.files.retrieve(f.id)


def _exactly_once(lines: list[dict[str, Any]], ids: list[str]) -> None:
    seen = [line["custom_id"] for line in lines]
    assert sorted(seen) == sorted(ids), "each custom_id exactly once"


def test_a_mixed_batch_fails_bad_requests_alone(gateway: Any) -> None:
    secret, _ = create_key(gateway.url, "mixed")
    sdk = client(gateway.url, secret)
    good = [chat_line(f"ok-{i}") for i in range(4)]
    bad = [chat_line("neg-max-tokens", max_tokens=-1), chat_line("hot", temperature=3.0)]  # known models: they run
    batch = submit(sdk, [good[0], bad[0], good[1], bad[1], *good[2:]])
    done = wait_for(sdk, batch.id, 120)
    assert done.status == "completed", done
    assert (done.request_counts.completed, done.request_counts.failed, done.request_counts.total) == (4, 2, 6)
    out = read_lines(sdk, done.output_file_id)
    errors = {e["custom_id"]: e for e in read_lines(sdk, done.error_file_id)}
    assert sorted(o["custom_id"] for o in out) == [f"ok-{i}" for i in range(4)]
    assert set(errors) == {"neg-max-tokens", "hot"}
    # the status and error the interactive path gives for the same body
    for custom_id, line in errors.items():
        body = next(b for b in bad if b["custom_id"] == custom_id)["body"]
        direct = httpx.post(
            gateway.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=60
        )
        assert line["response"]["status_code"] == direct.status_code
        assert 400 <= direct.status_code < 500
        assert line["response"]["body"]["error"]["param"] == direct.json()["error"]["param"]


def test_bad_input_is_refused_naming_the_field_or_line(start_gateway: Any, engine_url: str) -> None:
    flags = (
        "--files-max-bytes",
        "4096",
        "--batch-max-lines",
        "20",
        "--max-body-bytes",
        "1024",
        "--max-json-depth",
        "8",
    )
    gw = start_gateway(_models(engine_url), *BATCH_FLAGS, *flags)
    sdk = client(gw.url)

    def refused(call: Any, status: int, param: str, code: str | None = None) -> None:
        with pytest.raises(openai.APIStatusError) as exc:
            call()
        assert exc.value.status_code == status, exc.value
        assert exc.value.body["param"] == param, exc.value.body  # type: ignore[index]
        if code is not None:
            assert exc.value.body["code"] == code  # type: ignore[index]

    small = jsonl([chat_line("a")])
    # purpose missing or unknown
    r = httpx.post(gw.url + "/v1/files", files={"file": ("in.jsonl", small)}, timeout=10)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "purpose"
    refused(lambda: sdk.files.create(file=("in.jsonl", small), purpose="fine-tune"), 400, "purpose")
    # over the byte limit (4096) and the line limit (20)
    big = jsonl([chat_line(f"c{i}", "x" * 200) for i in range(30)])
    refused(lambda: sdk.files.create(file=("in.jsonl", big), purpose="batch"), 413, "file", "file_too_large")
    many = jsonl([{"custom_id": str(i)} for i in range(21)])
    assert len(many) < 4096
    refused(lambda: sdk.files.create(file=("in.jsonl", many), purpose="batch"), 400, "file", "too_many_lines")
    # the batch's own fields
    f = sdk.files.create(file=("in.jsonl", small), purpose="batch")
    refused(
        lambda: sdk.batches.create(input_file_id=f.id, endpoint="/v1/nothing", completion_window="24h"),  # type: ignore[arg-type]
        400,
        "endpoint",
    )  # /v1/embeddings is served: tests/gateway/test_gateway_embeddings.py
    refused(
        lambda: sdk.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="1h"),  # type: ignore[arg-type]
        400,
        "completion_window",
    )
    refused(
        lambda: sdk.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"),
        404,
        "input_file_id",
    )
    refused(lambda: sdk.batches.retrieve("batch_nope"), 404, "batch_id")

    # line by line: the batch fails, each error naming its line (and field)
    cases: list[tuple[list[Any], int, str, str | None]] = [
        ([chat_line("a"), '{"custom_id": "b", oops'], 2, "invalid_json_line", None),
        ([{**chat_line("a"), "url": "/v1/completions"}], 1, "invalid_url", "url"),
        ([chat_line("a"), {**chat_line("b"), "method": "GET"}], 2, "invalid_method", "method"),
        ([chat_line("a"), chat_line("b"), chat_line("a")], 3, "duplicate_custom_id", "custom_id"),
        ([chat_line("a", stream=True)], 1, "invalid_value", "body.stream"),
        ([{"method": "POST", "url": "/v1/chat/completions", "body": {}}], 1, "missing_required_parameter", "custom_id"),
        # a line is an interactive request: its size (--max-body-bytes), its nesting, a model served here
        ([chat_line("a"), chat_line("b", "x" * 1100)], 2, "line_too_large", None),
        (
            [
                {
                    **chat_line("a"),
                    "body": {"model": MODEL_NAME, "messages": [[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]},
                },
                chat_line("b"),
            ],
            1,
            "invalid_json_line",
            None,
        ),
        (
            [chat_line("a"), {**chat_line("b"), "body": {"model": "nope", "messages": []}}],
            2,
            "model_not_found",
            "body.model",
        ),
    ]
    for lines, line_no, code, param in cases:
        batch = submit(sdk, lines)
        assert batch.status == "failed", lines
        assert batch.failed_at is not None
        assert batch.errors is not None
        first = batch.errors.data[0]
        assert (first.line, first.code, first.param) == (line_no, code, param), first
        assert f"Line {line_no}" in (first.message or "")
        assert sdk.batches.retrieve(batch.id).status == "failed"
    # cancelling a finished batch
    refused(lambda: sdk.batches.cancel(batch.id), 409, "batch_id", "batch_not_cancellable")


def test_cancel_mid_way_keeps_the_partial_output(start_gateway: Any, engine_url: str) -> None:
    gw = start_gateway(_models(engine_url), *BATCH_FLAGS, "--batch-concurrency", "2", "--batch-slot-share", "1")
    sdk = client(gw.url)
    ids = [f"c{i}" for i in range(60)]
    batch = submit(sdk, [chat_line(i, max_tokens=24, ignore_eos=True) for i in ids])
    wait_done(sdk, batch.id, 2, 120)
    cancelling = sdk.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    assert cancelling.cancelling_at is not None
    done = wait_for(sdk, batch.id, 60)
    assert done.status == "cancelled", done
    assert done.cancelled_at is not None
    out = read_lines(sdk, done.output_file_id)
    counts = done.request_counts
    assert len(out) == counts.completed
    assert 2 <= counts.completed < 60  # the running lines finished; the rest never ran
    assert len({o["custom_id"] for o in out}) == len(out)
    with pytest.raises(openai.ConflictError):
        sdk.batches.cancel(batch.id)


def test_a_replica_killed_mid_batch_loses_nothing(start_gateway: Any, engine_url: str, redis_server: Any) -> None:
    import os
    import signal

    flags = (*BATCH_FLAGS, "--batch-concurrency", "4", "--batch-slot-share", "1")
    doomed = start_gateway(_models(engine_url), *flags)
    survivor = start_gateway(_models(engine_url), *flags)
    sdk = client(survivor.url)
    ids = [f"k{i}" for i in range(60)]
    batch = submit(client(doomed.url), [chat_line(i, max_tokens=16, ignore_eos=True) for i in ids])
    wait_done(sdk, batch.id, 5, 120)
    leases = redis_server.client().zcard(f"genmesh:gw:{{k:}}:batch:{batch.id}:leases")
    assert leases > 0  # lines are running as the replica dies
    os.kill(doomed.proc.pid, signal.SIGKILL)
    done = wait_for(sdk, batch.id, 300)
    assert done.status == "completed", done
    assert (done.request_counts.completed, done.request_counts.failed) == (60, 0)
    _exactly_once(read_lines(sdk, done.output_file_id), ids)
    assert done.error_file_id is None


def test_a_redis_restart_mid_batch_loses_nothing(start_gateway: Any, engine_url: str, tmp_path: Path) -> None:
    redis = AofRedis(tmp_path)
    redis.start()
    try:
        gw = start_gateway(_models(engine_url), *BATCH_FLAGS, "--batch-slot-share", "1", redis_url=redis.url)
        sdk = client(gw.url)
        ids = [f"r{i}" for i in range(60)]
        batch = submit(sdk, [chat_line(i, max_tokens=16, ignore_eos=True) for i in ids])
        wait_done(sdk, batch.id, 5, 120)
        redis.restart()
        done = wait_for(sdk, batch.id, 300)
        assert done.status == "completed", done
        assert (done.request_counts.completed, done.request_counts.failed) == (60, 0)
        _exactly_once(read_lines(sdk, done.output_file_id), ids)
    finally:
        redis.stop()


def test_an_expired_batch_sends_the_rest_to_the_error_file(start_gateway: Any, engine_url: str) -> None:
    flags = ("--batch-window-s", "3", "--batch-concurrency", "1", "--batch-slot-share", "1")
    gw = start_gateway(_models(engine_url), *BATCH_FLAGS, *flags)
    sdk = client(gw.url)
    ids = [f"e{i}" for i in range(40)]
    batch = submit(sdk, [chat_line(i, max_tokens=32, ignore_eos=True) for i in ids])
    assert batch.expires_at - batch.created_at == 3
    done = wait_for(sdk, batch.id, 60)
    assert done.status == "expired", done
    assert done.expired_at is not None
    out = read_lines(sdk, done.output_file_id)
    err = read_lines(sdk, done.error_file_id)
    _exactly_once(out + err, ids)
    assert err
    assert all(e["error"]["code"] == "batch_expired" and e["response"] is None for e in err)
    assert (done.request_counts.completed, done.request_counts.failed) == (len(out), len(err))


def test_a_key_at_its_rate_limit_has_its_lines_wait(gateway: Any) -> None:
    secret, key_id = create_key(gateway.url, "slow", rpm=3)
    sdk = client(gateway.url, secret)
    ids = [f"l{i}" for i in range(5)]
    batch = submit(sdk, [chat_line(i) for i in ids])
    done = wait_for(sdk, batch.id, 150)  # the minute's window turns within 60 s
    assert done.status == "completed", done
    # three lines in the window the batch started in; the other two waited for the next one
    assert done.completed_at >= (batch.created_at // 60 + 1) * 60
    assert (done.request_counts.completed, done.request_counts.failed) == (5, 0)
    _exactly_once(read_lines(sdk, done.output_file_id), ids)
    assert usage(gateway.url, key_id)["requests"] == 5


def test_a_responses_batch_and_a_completions_batch(gateway: Any) -> None:
    secret, _ = create_key(gateway.url, "endpoints")
    sdk = client(gateway.url, secret)
    bodies = {
        "/v1/responses": {"model": MODEL_NAME, "input": "Say hi.", "max_output_tokens": 4},
        "/v1/completions": {"model": MODEL_NAME, "prompt": "The capital of France is", "max_tokens": 4},
    }
    for endpoint, body in bodies.items():
        lines = [{"custom_id": f"x{i}", "method": "POST", "url": endpoint, "body": body} for i in range(3)]
        f = sdk.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = sdk.batches.create(input_file_id=f.id, endpoint=endpoint, completion_window="24h")  # type: ignore[arg-type]
        done = wait_for(sdk, batch.id, 120)
        assert done.status == "completed", done
        out = read_lines(sdk, done.output_file_id)
        assert sorted(o["custom_id"] for o in out) == ["x0", "x1", "x2"]
        kinds = {o["response"]["body"]["object"] for o in out}
        assert kinds == ({"response"} if endpoint == "/v1/responses" else {"text_completion"})


@pytest.mark.parametrize("preempt", [True, False], ids=["preempt", "no-preempt"])
def test_an_interactive_request_preempts_a_batch_line_holding_its_slot(
    start_gateway: Any, engine_url: str, preempt: bool
) -> None:
    # two slots, both held by long batch lines: an interactive request aborts the youngest and takes its
    # slot; with --no-batch-preempt it waits for a line to end
    flags = (*BATCH_FLAGS, "--batch-concurrency", "2", "--batch-slot-share", "1")
    gw = start_gateway(_models(engine_url, slots=2), *flags, "--batch-preempt" if preempt else "--no-batch-preempt")
    sdk = client(gw.url)
    ids = [f"p{i}" for i in range(4)]
    batch = submit(sdk, [chat_line(i, max_tokens=384, ignore_eos=True) for i in ids])
    until_metric(gw.url, "genmesh_gateway_batch_lines_running", 2)
    deadline, upstream = time.monotonic() + 60, upstream_name(engine_url)
    while counter(_metrics(gw.url), "genmesh_gateway_upstream_in_flight", model=MODEL_NAME, upstream=upstream) < 2:
        assert time.monotonic() < deadline, "the batch lines never held both slots"
        time.sleep(0.05)
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
    r = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    preempted = counter(_metrics(gw.url), "genmesh_gateway_batch_preemptions_total", model=MODEL_NAME)
    finished = sdk.batches.retrieve(batch.id).request_counts.completed
    if preempt:  # served while both lines still had hundreds of tokens to go: it took a preempted line's slot
        assert finished == 0
        assert preempted >= 1
    else:  # it waited for a line to end
        assert finished >= 1
        assert preempted == 0
    done = wait_for(sdk, batch.id, 240)
    assert done.status == "completed", done
    assert (done.request_counts.completed, done.request_counts.failed) == (4, 0)
    out = read_lines(sdk, done.output_file_id)
    _exactly_once(out, ids)  # the preempted line ran again from the start, and is written once
    assert all(o["response"]["body"]["usage"]["completion_tokens"] == 384 for o in out)


def test_a_batch_past_its_output_quota_fails_with_the_lines_done_kept(start_gateway: Any, engine_url: str) -> None:
    flags = ("--batch-concurrency", "2", "--batch-slot-share", "1", "--batch-output-max-bytes", "4000")
    gw = start_gateway(_models(engine_url), "--auth", "on", *BATCH_FLAGS, *flags)
    secret, _ = create_key(gw.url, "big-output")
    other, _ = create_key(gw.url, "other")
    sdk = client(gw.url, secret)
    ids = [f"q{i}" for i in range(20)]
    f = sdk.files.create(file=("in.jsonl", jsonl([chat_line(i, max_tokens=8) for i in ids])), purpose="batch")
    batch = sdk.batches.create(
        input_file_id=f.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        output_expires_after={"anchor": "created_at", "seconds": 3600},
    )
    reply = client(gw.url, other).chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert reply.choices  # another tenant is served meanwhile
    done = wait_for(sdk, batch.id, 180)
    assert done.status == "failed", done
    assert done.failed_at is not None
    assert done.errors is not None
    assert done.errors.data is not None
    assert done.errors.data[0].code == "quota_exceeded"
    assert "batch_output_max_bytes" in (done.errors.data[0].message or "")
    out = read_lines(sdk, done.output_file_id)
    assert 1 <= len(out) < len(ids)  # the lines done before the quota are kept
    assert len(out) == done.request_counts.completed
    assert len({o["custom_id"] for o in out}) == len(out)
    output = sdk.files.retrieve(done.output_file_id)
    assert output.bytes <= 4000
    assert output.expires_at is not None
    assert output.expires_at - output.created_at == 3600  # output_expires_after
    with pytest.raises(openai.ConflictError):
        sdk.batches.cancel(batch.id)
    with pytest.raises(openai.BadRequestError):
        sdk.batches.create(
            input_file_id=f.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            output_expires_after={"anchor": "created_at", "seconds": 10},
        )
