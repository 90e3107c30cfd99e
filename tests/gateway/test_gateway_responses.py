"""``/v1/responses`` through the gateway (two replicas sharing one Redis) -> microservice -> the real
engine: stored conversations, retrieve, delete, input items, key scoping, size cap, TTL, metering,
the OpenAI client and the Agents SDK."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from support.aof_redis import AofRedis
from support.gateway_helpers import ADMIN_KEY, RedisServer
from support.polling import wait_until
from support.responses import TOOL_RESULT, assert_event_sequence, run_forced_tool_agent
from support.servers import MODEL_NAME, Server, free_port, start_server


@pytest.fixture(scope="module")
def responses_microservice(engine_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = free_port()
    argv = [sys.executable, "-m", "genmesh.microservice", "--llm-endpoint", engine_url, "--port", str(port)]
    log_dir: Path = tmp_path_factory.mktemp("responses-microservice")
    server = start_server(
        "microservice", argv, port, log_dir, health_path="/v1/health_check", env={"OPENAI_API_KEY": ""}
    )
    yield server
    server.stop()


def models(microservice: Server) -> dict[str, Any]:
    ups = [{"url": microservice.url, "max_concurrency": 2, "health_path": "/v1/health_check"}]
    return {MODEL_NAME: {"upstreams": ups}}


def new_key(gateway: Server) -> tuple[str, str]:
    """A new API key: its secret and its id."""
    r = httpx.post(
        gateway.url + "/admin/keys", json={"tenant": "t"}, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=5
    )
    assert r.status_code == 201, r.text
    return str(r.json()["api_key"]), str(r.json()["key_id"])


def usage_of(gateway: Server, key_id: str) -> dict[str, int]:
    r = httpx.get(
        gateway.url + f"/admin/keys/{key_id}/usage", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=5
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def stored_keys(redis_server: RedisServer) -> list[bytes]:
    return list(redis_server.client().scan_iter(match="genmesh:gw:resp:*"))


def sdk(gateway: Server, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)


def test_a_conversation_across_two_replicas(
    start_gateway: Any, responses_microservice: Server, redis_server: RedisServer
) -> None:
    first_gw = start_gateway(models(responses_microservice), "--auth", "on", "--responses-ttl-s", "600")
    second_gw = start_gateway(models(responses_microservice), "--auth", "on")
    (key, key_id), (other, _) = new_key(first_gw), new_key(first_gw)
    a1, a2, b = sdk(first_gw, key), sdk(second_gw, key), sdk(first_gw, other)

    first = a1.responses.create(model=MODEL_NAME, input="My name is Ann.", max_output_tokens=8)
    assert first.store is True
    assert first.previous_response_id is None
    ttl_ms = redis_server.client().pttl(f"genmesh:gw:resp:{first.id}")
    assert 0 < ttl_ms <= 600_000

    # the second turn goes to the other replica, streamed: it rebuilds the conversation from Redis
    events = list(
        a2.responses.create(
            model=MODEL_NAME, input="What is my name?", previous_response_id=first.id, max_output_tokens=8, stream=True
        )
    )
    second = assert_event_sequence(events)
    assert second.previous_response_id == first.id
    assert second.store is True
    assert events[0].response.previous_response_id == first.id
    assert second.usage is not None
    assert first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens

    # the whole conversation, stored once, read back through the first replica
    items = a1.responses.input_items.list(second.id, order="asc").data
    assert [getattr(i, "type", None) for i in items] == ["message", "message", "message"]
    assert items[0].content[0].text == "My name is Ann."  # type: ignore[union-attr]
    assert items[1].id == first.output[0].id
    assert items[2].content[0].text == "What is my name?"  # type: ignore[union-attr]
    got = a1.responses.retrieve(second.id)
    assert got.id == second.id
    assert got.output_text == second.output_text
    assert got.previous_response_id == first.id

    # another key sees none of it: 404 everywhere
    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError) as exc:
        b.responses.create(model=MODEL_NAME, input="x", previous_response_id=first.id, max_output_tokens=2)
    assert exc.value.body["param"] == "previous_response_id"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        b.responses.delete(first.id)

    # delete, then it is gone for every replica and for follow-ups
    a2.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        a1.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        a1.responses.create(model=MODEL_NAME, input="x", previous_response_id=first.id, max_output_tokens=2)
    assert a1.responses.retrieve(second.id).id == second.id  # the follow-up keeps its own copy

    # metered like chat: the key's usage counts both turns' tokens
    want = first.usage.input_tokens + second.usage.input_tokens
    wait_until(lambda: usage_of(first_gw, key_id)["prompt_tokens"] >= want, 10, what="usage accounted")
    assert usage_of(first_gw, key_id)["completion_tokens"] == first.usage.output_tokens + second.usage.output_tokens


def test_nothing_is_stored_for_store_false_or_a_failed_request(
    start_gateway: Any, responses_microservice: Server, redis_server: RedisServer
) -> None:
    gw = start_gateway(models(responses_microservice), "--responses-max-bytes", "4096")
    client = sdk(gw, "unused")
    kept = client.responses.create(model=MODEL_NAME, input="hi", max_output_tokens=2, store=False)
    assert kept.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(kept.id)
    for body, status, param in [
        ({"input": 5}, 400, "input"),
        ({"input": [{"type": "nope"}]}, 400, "input[0].type"),
        ({"input": "x", "previous_response_id": "resp_missing"}, 404, "previous_response_id"),
        ({"input": "y" * 5000}, 413, "input"),
    ]:
        r = httpx.post(gw.url + "/v1/responses", json={"model": MODEL_NAME, **body}, timeout=60)
        assert r.status_code == status, r.text
        assert r.json()["error"]["param"] == param
    assert stored_keys(redis_server) == []


@pytest.mark.parametrize("stream", [False, True])
async def test_agents_sdk_through_the_gateway(start_gateway: Any, responses_microservice: Server, stream: bool) -> None:
    gw = start_gateway(models(responses_microservice))
    result, calls = await run_forced_tool_agent(gw.url + "/v1", stream)
    assert result == TOOL_RESULT
    assert len(calls) == 1


def test_stored_responses_survive_a_restart_of_a_persistent_redis(
    start_gateway: Any, responses_microservice: Server, tmp_path: Path
) -> None:
    """Redis as compose runs it (AOF on): a stored conversation outlives a Redis restart."""
    redis = AofRedis(tmp_path)
    redis.start()
    try:
        gw = start_gateway(models(responses_microservice), redis_url=redis.url)
        client = sdk(gw, "unused")
        first = client.responses.create(model=MODEL_NAME, input="Remember the number 7.", max_output_tokens=4)
        redis.restart()
        wait_until(lambda: _retrievable(gw, first.id), 20, interval_s=0.2, what="the stored response after restart")
        follow = client.responses.create(
            model=MODEL_NAME, input="Which number?", previous_response_id=first.id, max_output_tokens=4
        )
        assert follow.previous_response_id == first.id
    finally:
        redis.stop()


def _retrievable(gw: Server, response_id: str) -> bool:
    return httpx.get(f"{gw.url}/v1/responses/{response_id}", timeout=5).status_code == 200


def test_a_key_past_its_stored_responses_quota_is_refused_before_it_runs(
    start_gateway: Any, responses_microservice: Server, redis_server: RedisServer
) -> None:
    gw = start_gateway(models(responses_microservice), "--auth", "on", "--responses-key-max-count", "1")
    (key, key_id), (other, _) = new_key(gw), new_key(gw)
    a, b = sdk(gw, key), sdk(gw, other)
    first = a.responses.create(model=MODEL_NAME, input="Hi", max_output_tokens=4)
    assert first.store is True
    before = usage_of(gw, key_id)["requests"]
    with pytest.raises(openai.RateLimitError) as refused:
        a.responses.create(model=MODEL_NAME, input="Hi again", max_output_tokens=4)
    err = refused.value.body
    assert isinstance(err, dict)
    assert err["code"] == "quota_exceeded"
    assert "responses_key_max_count" in err["message"]
    assert usage_of(gw, key_id)["requests"] == before  # refused before it ran
    assert a.responses.retrieve(first.id).id == first.id  # nothing stored is harmed
    unstored = a.responses.create(model=MODEL_NAME, input="Hi", max_output_tokens=4, store=False)
    assert unstored.store is False
    assert b.responses.create(model=MODEL_NAME, input="Hi", max_output_tokens=4).store is True  # another key
    a.responses.delete(first.id)  # gives its place back
    assert a.responses.create(model=MODEL_NAME, input="Hi", max_output_tokens=4).store is True
