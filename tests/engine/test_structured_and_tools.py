"""Structured output and tool calls on the real engine: outputs always parse and validate."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from genmesh.engine import tools
from genmesh.protocol import ChatCompletionRequest
from support.servers import GENMESH_ENGINE_ONLY

CHAT = "/v1/chat/completions"

CAT = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 30},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 20}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(url + CHAT, json=body, timeout=120)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


@GENMESH_ENGINE_ONLY
def test_json_object_parses(engine_url: str) -> None:
    body = {
        "messages": [{"role": "user", "content": "Describe a cat as JSON with keys name and age."}],
        "response_format": {"type": "json_object"},
        "max_tokens": 200,
        "temperature": 0,
        "frequency_penalty": 1.0,  # the 135M model otherwise repeats keys until max_tokens
    }
    choice = post(engine_url, body)["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert isinstance(json.loads(choice["message"]["content"]), dict)


@GENMESH_ENGINE_ONLY
@pytest.mark.parametrize("streamed", [False, True])
def test_json_schema_output_validates(engine_url: str, streamed: bool) -> None:
    body = {
        "messages": [{"role": "user", "content": "Invent a cat."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "cat", "schema": CAT}},
        "max_tokens": 120,
        "temperature": 0.8,
        "seed": 11,
    }
    if streamed:
        text = ""
        with httpx.stream("POST", engine_url + CHAT, json={**body, "stream": True}, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    for c in json.loads(line[6:])["choices"]:
                        text += c["delta"].get("content") or ""
    else:
        text = post(engine_url, body)["choices"][0]["message"]["content"]
    jsonschema.validate(json.loads(text), CAT)


@GENMESH_ENGINE_ONLY
@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [({"type": "function", "function": {"name": "get_time"}}, {"get_time"}), ("required", {"get_weather", "get_time"})],
)
def test_forced_tool_call_matches_its_schema(engine_url: str, tool_choice: Any, expected: set[str]) -> None:
    body = {"messages": ASK, "tools": [WEATHER, TIME], "tool_choice": tool_choice, "max_tokens": 80, "temperature": 0}
    choice = post(engine_url, body)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function"
    assert call["id"].startswith("call_")
    assert call["function"]["name"] in expected
    schema = {"get_weather": WEATHER, "get_time": TIME}[call["function"]["name"]]["function"]["parameters"]
    jsonschema.validate(json.loads(call["function"]["arguments"]), schema)


@GENMESH_ENGINE_ONLY
def test_tool_call_streamed_through_the_openai_client(engine_url: str) -> None:
    client = openai.OpenAI(base_url=engine_url + "/v1", api_key="unused")
    stream = client.chat.completions.create(
        model="SmolLM2-135M-Instruct",
        messages=ASK,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=80,
        temperature=0,
        stream=True,
    )
    args, names, finish = "", [], None
    for chunk in stream:
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                if call.function and call.function.name:
                    names.append(call.function.name)
                args += (call.function.arguments or "") if call.function else ""
            finish = choice.finish_reason or finish
    assert names == ["get_weather"]
    assert finish == "tool_calls"
    jsonschema.validate(json.loads(args), WEATHER["function"]["parameters"])  # type: ignore[index]


@GENMESH_ENGINE_ONLY
def test_auto_gives_text_or_valid_calls(engine_url: str) -> None:
    body = {"messages": ASK, "tools": [WEATHER], "tool_choice": "auto", "max_tokens": 80, "temperature": 0}
    message = post(engine_url, body)["choices"][0]["message"]
    for call in message.get("tool_calls") or []:
        jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER["function"]["parameters"])  # type: ignore[index]
    assert message.get("tool_calls") or message["content"]


@GENMESH_ENGINE_ONLY
def test_tool_results_in_the_history_reach_the_prompt(engine_url: str) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    history = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny, light wind from the west"},
    ]
    with_result = post(engine_url, {"messages": history, "tools": [WEATHER], "max_tokens": 20})
    without = post(engine_url, {"messages": ASK, "tools": [WEATHER], "max_tokens": 20})
    assert with_result["usage"]["prompt_tokens"] > without["usage"]["prompt_tokens"] + 15
    assert with_result["choices"][0]["message"]["content"] or with_result["choices"][0]["message"]["tool_calls"]


# --- tool-call parsing without the engine ---------------------------------------------------------


def plan(choice: Any = "auto", template: str = "") -> tools.ToolPlan:
    req = ChatCompletionRequest.model_validate({"messages": ASK, "tools": [WEATHER, TIME], "tool_choice": choice})
    p = tools.plan_tools(req, template)
    assert p is not None
    return p


def test_hermes_blocks_are_split_from_content() -> None:
    text = 'Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}</tool_call>'
    content, calls = tools.parse(text, plan())
    assert content == "Let me check."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Oslo", "unit": "C"})
    ]


def test_text_without_calls_stays_content() -> None:
    assert tools.parse("It is sunny.", plan()) == ("It is sunny.", [])
    assert tools.parse("<tool_call>not json</tool_call>", plan())[1] == []


def test_llama3_templates_use_the_library_parser() -> None:
    p = plan(template="<|start_header_id|>{{ tools }}")
    assert p.format == "llama3_json"
    assert p.native
    assert p.constraint is None
    content, calls = tools.parse('{"name": "get_time", "parameters": {"zone": "UTC"}}', p)
    assert content is None
    assert calls[0].function.name == "get_time"


def test_call_splitter_holds_back_a_partial_tag() -> None:
    s = tools.CallSplitter()
    assert s.feed("Hello <tool", False) == "Hello "
    assert s.feed("_call>{", False) == ""
    assert s.in_call
    assert s.rest == "<tool_call>{"
    plain = tools.CallSplitter()
    assert plain.feed("a <to", False) == "a "
    assert plain.feed("day", True) == "<today"


def test_tool_choice_none_means_no_plan() -> None:
    req = ChatCompletionRequest.model_validate({"messages": ASK, "tools": [WEATHER], "tool_choice": "none"})
    assert tools.plan_tools(req, "") is None
