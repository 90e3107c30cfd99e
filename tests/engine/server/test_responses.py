"""``POST /v1/responses`` on the engine, driven by the official OpenAI client and the Agents SDK.

The default model is a 135M model and the CPU varies between machines: every assertion is about
structure (event order, items, usage, a tool call made and its result used), never exact text.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from support.polling import wait_until
from support.responses import (
    CITY_TOOL,
    assert_event_sequence,
    run_forced_tool_agent,
    stream_events,
)
from support.servers import MODEL_NAME, metric_value, start_engine


@pytest.fixture(params=["/v1", "/v3"])
def client(engine_url: str, request: pytest.FixtureRequest) -> openai.OpenAI:
    return openai.OpenAI(base_url=engine_url + request.param, api_key="unused", max_retries=0)


def test_unary_text(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model=MODEL_NAME, input="Say this is a test", instructions="Answer briefly.", max_output_tokens=12
    )
    assert r.object == "response"
    assert r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert [item.type for item in r.output] == ["message"]
    assert r.output[0].role == "assistant"
    assert r.output[0].content[0].type == "output_text"
    assert isinstance(r.output_text, str)
    assert r.instructions == "Answer briefly."
    assert r.store is False  # the engine keeps nothing
    assert r.usage is not None
    assert r.usage.input_tokens > 0
    assert 0 < r.usage.output_tokens <= 12
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    if r.status == "incomplete":
        assert r.incomplete_details is not None
        assert r.incomplete_details.reason == "max_output_tokens"
        assert r.usage.output_tokens == 12


def test_cut_by_max_output_tokens_is_incomplete(client: openai.OpenAI) -> None:
    # A long answer at temperature 0 cannot end in 3 tokens on any machine.
    r = client.responses.create(
        model=MODEL_NAME, input="Write a long story about a dragon.", max_output_tokens=3, temperature=0
    )
    assert r.status == "incomplete"
    assert r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].status == "incomplete"
    assert r.usage is not None
    assert r.usage.output_tokens == 3


def test_streamed_text_follows_the_event_sequence(client: openai.OpenAI) -> None:
    stream = client.responses.create(model=MODEL_NAME, input="Say this is a test", max_output_tokens=16, stream=True)
    events = list(stream)
    final = assert_event_sequence(events)
    types = [e.type for e in events]
    assert "response.output_text.delta" in types or final.output_text == ""
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = [e for e in events if e.type == "response.output_text.done"]
    assert len(done) == 1
    assert done[0].text == deltas == final.output_text
    assert final.usage is not None
    assert 0 < final.usage.output_tokens <= 16


def test_stream_helper_accumulates_the_same_response(client: openai.OpenAI) -> None:
    """The SDK's ``responses.stream`` rebuilds the response from the events and checks their order
    (it wants ``response.completed``: a schema with a short answer always completes)."""
    colour = {"type": "object", "properties": {"colour": {"enum": ["red", "green"]}}, "required": ["colour"]}
    fmt = {"format": {"type": "json_schema", "name": "colour", "schema": colour}}
    with client.responses.stream(model=MODEL_NAME, input="Name a colour.", text=fmt) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.status == "completed"
    assert final.output[0].type == "message"
    assert json.loads(final.output_text)["colour"] in ("red", "green")


def test_forced_function_call_unary_and_streamed(client: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {"model": MODEL_NAME, "input": "What is the weather in Paris?", "tools": [CITY_TOOL]}
    r = client.responses.create(**kwargs, tool_choice="required")
    calls = [item for item in r.output if item.type == "function_call"]
    assert r.status == "completed"
    assert len(calls) == 1
    assert calls[0].name == "get_weather"
    jsonschema.validate(json.loads(calls[0].arguments), CITY_TOOL["parameters"])
    assert calls[0].call_id

    events = list(
        client.responses.create(**kwargs, tool_choice={"type": "function", "name": "get_weather"}, stream=True)
    )
    final = assert_event_sequence(events)
    call = next(item for item in final.output if item.type == "function_call")
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert "".join(d.delta for d in deltas) == done[0].arguments == call.arguments
    assert done[0].name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), CITY_TOOL["parameters"])


SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("stream", [False, True])
def test_text_format_json_schema_always_parses(client: openai.OpenAI, stream: bool) -> None:
    fmt = {"format": {"type": "json_schema", "name": "person", "schema": SCHEMA, "strict": True}}
    kwargs: dict[str, Any] = {"model": MODEL_NAME, "input": "Invent a person.", "text": fmt}
    if stream:
        final = assert_event_sequence(list(client.responses.create(**kwargs, stream=True)))
    else:
        final = client.responses.create(**kwargs)
    assert final.status == "completed"
    jsonschema.validate(json.loads(final.output_text), SCHEMA)
    assert final.text is not None
    assert final.text.format.type == "json_schema"


def test_text_format_json_object(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model=MODEL_NAME,
        input="Describe a cat as JSON.",
        text={"format": {"type": "json_object"}},
        max_output_tokens=200,
    )
    assert r.usage is not None
    if r.status == "completed":  # free JSON may run long; what completes parses
        assert isinstance(json.loads(r.output_text), dict)
    else:
        assert r.usage.output_tokens == 200
        assert r.output_text.startswith("{")


def test_a_conversation_with_a_tool_result_in_the_input(client: openai.OpenAI) -> None:
    """Every input item type the engine reads: roles, content parts, a call and its output."""
    r = client.responses.create(
        model=MODEL_NAME,
        input=[
            {"role": "developer", "content": "You report the weather."},
            {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 24 C"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
            {"role": "user", "content": "And tomorrow?"},
        ],
        tools=[CITY_TOOL],
        max_output_tokens=16,
        metadata={"trace": "t1"},
        parallel_tool_calls=False,
        user="u-42",
        temperature=0.7,
        top_p=0.9,
        extra_body={"seed": 7, "stop": ["\n\n"]},
    )
    assert r.status in ("completed", "incomplete")
    assert r.metadata == {"trace": "t1"}
    assert r.parallel_tool_calls is False
    assert r.usage is not None
    assert r.usage.input_tokens > 20


BAD: list[tuple[dict[str, Any], str]] = [
    ({"input": 5}, "input"),
    ({"input": [{"type": "telepathy"}]}, "input[0].type"),
    ({"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}, "input[0].type"),
    ({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}, "input[0].call_id"),
    (
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]},
        "input[0].content[0]",
    ),
    ({"input": "x", "previous_response_id": "resp_123"}, "previous_response_id"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "include": ["message.output_text.logprobs"]}, "include"),
    ({"input": "x", "frobnicate": True}, "frobnicate"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": 5}}}}, "text.format"),
    ({"input": "x", "max_output_tokens": 10**6}, "max_output_tokens"),
    ({"input": "x", "tool_choice": {"type": "function", "name": "missing"}, "tools": [CITY_TOOL]}, "tool_choice"),
]


@pytest.mark.parametrize(("body", "param"), BAD, ids=[p for _, p in BAD])
def test_bad_input_is_a_400_naming_the_field(engine_url: str, body: dict[str, Any], param: str) -> None:
    r = httpx.post(engine_url + "/v1/responses", json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] is not None, err
    assert err["param"].startswith(param), err
    assert err["type"] == "invalid_request_error"
    if param == "previous_response_id":
        assert "stateless" in err["message"]
        assert "gateway" in err["message"]


def test_streaming_client_disconnect_aborts(engine_url: str) -> None:
    wait_until(lambda: metric_value(engine_url, "genmesh_engine_requests_running") == 0, 60, what="idle engine")
    body = {"input": "Write a very long story.", "max_output_tokens": 4000, "stream": True, "temperature": 0}
    with httpx.stream("POST", engine_url + "/v1/responses", json=body, timeout=60) as r:
        deltas = 0
        for line in r.iter_lines():
            deltas += line == "event: response.output_text.delta"
            if deltas >= 3:
                wait_until(lambda: metric_value(engine_url, "genmesh_engine_requests_running") == 1, 10, what="running")
                break
    wait_until(lambda: metric_value(engine_url, "genmesh_engine_requests_running") == 0, 10, what="abort")


@pytest.mark.parametrize("stream", [False, True])
async def test_agents_sdk_forced_tool_returns_its_result(engine_url: str, stream: bool) -> None:
    result, calls = await run_forced_tool_agent(engine_url + "/v1", stream)
    assert result == "SECRET-4242"
    assert len(calls) == 1
    assert isinstance(calls[0], str)
    assert calls[0]


@pytest.mark.slow
def test_an_error_mid_stream_is_an_error_event_then_response_failed(tmp_path: Path) -> None:
    import psutil

    engine = start_engine(tmp_path)
    try:
        children = psutil.Process(engine.proc.pid).children(recursive=True)
        core = next(c for c in children if "spawn_main" in " ".join(c.cmdline()))
        body = {"input": "Tell a long story.", "max_output_tokens": 4000, "stream": True}
        kill = threading.Event()
        threading.Thread(target=lambda: kill.wait(30) and core.kill(), daemon=True).start()
        events = stream_events(engine.url + "/v1/responses", body, on_delta=lambda n: n == 3 and kill.set())
        assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
        assert events[-2]["code"] == "engine_unavailable" or "exited" in events[-2]["message"]
        failed = events[-1]["response"]
        assert failed["status"] == "failed"
        assert failed["error"]["code"] == "server_error"
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
    finally:
        engine.stop()
