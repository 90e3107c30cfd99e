"""``POST /v1/responses`` through the microservice to the real engine: the OpenAI client (unary
and streamed), the Agents SDK, bad input refused here by name, and a stream the engine breaks off."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from support.responses import CITY_TOOL, TOOL_RESULT, assert_event_sequence, run_forced_tool_agent
from support.servers import MODEL_NAME


@pytest.fixture
def client(microservice_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=microservice_url + "/v1", api_key="unused", max_retries=0)


def test_unary_and_streamed(client: openai.OpenAI) -> None:
    r = client.responses.create(model=MODEL_NAME, input="Say this is a test", max_output_tokens=8)
    assert r.object == "response"
    assert r.output[0].type == "message"
    assert r.usage is not None
    assert 0 < r.usage.output_tokens <= 8
    final = assert_event_sequence(
        list(
            client.responses.create(
                input="Weather in Paris?", tools=[CITY_TOOL], tool_choice="required", stream=True, model=MODEL_NAME
            )
        )
    )
    assert [i.type for i in final.output] == ["function_call"]


def test_model_defaults_and_bad_input_is_refused_here(microservice_url: str) -> None:
    r = httpx.post(microservice_url + "/v1/responses", json={"input": "hi", "max_output_tokens": 2}, timeout=60)
    assert r.status_code == 200
    assert r.json()["model"] == MODEL_NAME
    bad: list[tuple[dict[str, Any], str]] = [
        ({"input": 3}, "input"),
        ({"input": [{"type": "nope"}]}, "input[0].type"),
        ({"input": "x", "unknown_field": 1}, "unknown_field"),
    ]
    for body, param in bad:
        r = httpx.post(microservice_url + "/v1/responses", json=body, timeout=30)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == param


@pytest.mark.parametrize("stream", [False, True])
async def test_agents_sdk_forced_tool_returns_its_result(microservice_url: str, stream: bool) -> None:
    result, calls = await run_forced_tool_agent(microservice_url + "/v1", stream)
    assert result == TOOL_RESULT
    assert len(calls) == 1


def test_a_cut_stream_ends_with_error_then_response_failed() -> None:
    """What the relay appends when the engine breaks a Responses stream off: numbered after the last
    event the client saw, and carrying the response's id."""
    import json

    from genmesh.microservice.routes.responses import ResponsesEnd
    from genmesh.protocol import OpenAIError

    end = ResponsesEnd(MODEL_NAME)
    created = b'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1"'
    assert not end.ended(created)
    assert not end.ended(b'data: {"type":"response.output_text.delta","sequence_number":7,"delta":"hi"}\n\n')
    tail = end.failure(OpenAIError("cut", status=502, code="engine_stream_cut")).decode()
    events = [json.loads(line[6:]) for line in tail.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == ["error", "response.failed"]
    assert [e["sequence_number"] for e in events] == [8, 9]
    assert events[1]["response"]["id"] == "resp_1"
    assert events[1]["response"]["status"] == "failed"
    assert end.ended(b'data: {"type":"response.completed","sequence_number":9}')
