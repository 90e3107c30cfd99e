"""The Batch API end to end: the openai SDK -> gateway (Files, Batches, runner) -> the real engine,
on a real Redis."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion

from support.batches import chat_line, client, create_key, jsonl, read_lines, usage, wait_done, wait_for
from support.gateway_helpers import ADMIN_KEY, counter
from support.servers import MODEL_NAME

BATCH_FLAGS = ("--batch-lease-ttl-s", "3", "--batch-poll-interval-s", "0.2")


def _models(engine_url: str, slots: int = 8) -> dict[str, Any]:
    return {MODEL_NAME: {"upstreams": [{"url": engine_url, "max_concurrency": slots}], "max_queue_wait_s": 120}}


@pytest.fixture
def gateway(start_gateway: Any, engine_url: str) -> Any:
    return start_gateway(_models(engine_url), "--auth", "on", *BATCH_FLAGS, "--batch-slot-share", "1")


def test_sdk_batch_of_200_chat_lines(gateway: Any) -> None:
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
    mid = wait_done(sdk, batch.id, 1, 120)
    assert mid.status in ("in_progress", "finalizing", "completed")
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
    metrics = httpx.get(gateway.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10).text
    assert counter(metrics, "genmesh_gateway_batch_lines_total", model=MODEL_NAME, outcome="completed") == 200
    assert "genmesh_gateway_queue_depth_by_kind" in metrics

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
