"""Structured output and tool calls on the real engine: outputs always parse and validate."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from support.servers import GENMESH_ENGINE_ONLY
from support.structured_cases import CITY, FLAT, TIME_TOOL, WEATHER_TOOL, check_every_case, reply_text

CHAT = "/v1/chat/completions"

WEATHER = WEATHER_TOOL
TIME = TIME_TOOL
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(url + CHAT, json=body, timeout=120)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


@GENMESH_ENGINE_ONLY
@pytest.mark.parametrize("stream", [False, True], ids=["unary", "streamed"])
async def test_every_sampled_structured_reply_parses_and_validates(engine_url: str, stream: bool) -> None:
    await check_every_case("the engine", engine_url, stream)


@GENMESH_ENGINE_ONLY
def test_greedy_json_never_runs_away_in_digits_or_whitespace(engine_url: str) -> None:
    """The issue's own case: an unbounded integer at temperature 0 wrote 1111... until max_tokens."""
    body = {
        "messages": [{"role": "user", "content": "Name a big city and its population."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}},
        "temperature": 0,
        "max_tokens": 200,
    }
    choice = post(engine_url, body)["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    value = json.loads(choice["message"]["content"])
    jsonschema.validate(value, CITY)
    assert len(str(abs(value["population"]))) <= 19


VLLM_FIELDS = [
    ({"structured_outputs": {"choice": ["positive", "negative"]}}, lambda t: t in ("positive", "negative")),
    ({"guided_choice": ["yes", "no"]}, lambda t: t in ("yes", "no")),
    ({"structured_outputs": {"regex": r"[A-Z]{3}-[0-9]{2}"}}, lambda t: re.fullmatch(r"[A-Z]{3}-[0-9]{2}", t)),
    ({"guided_regex": r"(cat|dog)s?"}, lambda t: re.fullmatch(r"(cat|dog)s?", t)),
    ({"structured_outputs": {"grammar": 'root ::= "SELECT " [a-z]{1,8} " FROM " [a-z]{1,8}'}}, None),
    ({"guided_grammar": 'root ::= ("up" | "down") " " [0-9]'}, lambda t: re.fullmatch(r"(up|down) [0-9]", t)),
    ({"structured_outputs": {"json": FLAT}}, lambda t: jsonschema.validate(json.loads(t), FLAT) is None),
    ({"guided_json": json.dumps(FLAT)}, lambda t: jsonschema.validate(json.loads(t), FLAT) is None),
    ({"structured_outputs": {"json_object": True}}, lambda t: isinstance(json.loads(t), dict)),
]


@GENMESH_ENGINE_ONLY
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize(("fields", "check"), VLLM_FIELDS)
def test_vllm_structured_output_fields(engine_url: str, path: str, fields: dict[str, Any], check: Any) -> None:
    # Greedy, so the prompt must lead somewhere short: schema-free JSON has room for long strings,
    # and a bare "Answer:" sent the faithful model into a 256-character key on AMD EPYC.
    ask = 'A JSON object with a "name" key: ' if "json_object" in str(fields) else "Answer:"
    if path == "/v1/chat/completions":
        body: dict[str, Any] = {"messages": [{"role": "user", "content": ask}]}
    else:
        body = {"prompt": ask}
    r = httpx.post(engine_url + path, json={**body, **fields, "max_tokens": 120, "temperature": 0}, timeout=120)
    assert r.status_code == 200, r.text
    text, finish = reply_text(r.json())
    assert finish == "stop", (text, finish)
    if check is None:
        assert re.fullmatch(r"SELECT [a-z]{1,8} FROM [a-z]{1,8}", text), text
    else:
        assert check(text), text


UNIQUE = {"type": "array", "uniqueItems": True}


@GENMESH_ENGINE_ONLY
@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"response_format": {"type": "json_object"}, "guided_regex": "a+"}, "guided_regex"),
        ({"structured_outputs": {"choice": ["a"], "regex": "b"}}, "structured_outputs.choice"),
        ({"structured_outputs": {}}, "structured_outputs"),
        ({"structured_outputs": {"structural_tag": "{}"}}, "structured_outputs.structural_tag"),
        ({"guided_whitespace_pattern": " *", "guided_json": {}}, "guided_whitespace_pattern"),
        ({"guided_regex": "a(?=b)"}, "guided_regex"),
        ({"guided_grammar": 'root ::= root "a"'}, "guided_grammar"),
        ({"guided_grammar": "root ::= undefined_rule"}, "guided_grammar"),
        ({"guided_json": "{not json"}, "guided_json"),
        ({"guided_choice": []}, "guided_choice"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"schema": {"type": "array", "uniqueItems": True}},
                }
            },
            "response_format.json_schema.schema.uniqueItems",
        ),
        (
            {"structured_outputs": {"json": {"properties": {"n": {"type": "integer", "multipleOf": 3}}}}},
            "structured_outputs.json.properties.n.multipleOf",
        ),
        ({"tools": [WEATHER], "tool_choice": "required", "guided_choice": ["a"]}, "guided_choice"),
    ],
)
def test_constraints_that_cannot_be_enforced_are_400s_naming_the_field(
    engine_url: str, body: dict[str, Any], param: str
) -> None:
    r = httpx.post(engine_url + CHAT, json={"messages": ASK, "max_tokens": 5, **body}, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param, error
    assert len(r.content) < 4096
    assert httpx.get(engine_url + "/health", timeout=10).status_code == 200


@GENMESH_ENGINE_ONLY
def test_oversized_grammars_are_refused_before_the_engine(engine_url: str) -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    wide = {"type": "object", "properties": {f"p{i}": {"enum": [f"v{i}_{j}" for j in range(40)]} for i in range(400)}}
    for schema in (deep, wide):
        r = httpx.post(engine_url + CHAT, json={"messages": ASK, "guided_json": schema}, timeout=60)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"].startswith("guided_json"), error
        assert len(error["param"]) <= 201
        assert len(r.content) < 4096


@GENMESH_ENGINE_ONLY
def test_tricky_client_grammars_compile_in_the_engine(engine_url: str) -> None:
    """Everything the writer emits must compile in OpenVINO GenAI: a grammar that does not
    fails inside a batched step and ends the engine core, with every request in it."""
    grammars = [
        'root ::= "q\\"b\\\\s\\t" [\\x00-\\x1f\\]\\^\\-\\[]? "é中"',
        'root ::= [^\\x00-\\x7f]{1,3} | "\\U0001f600"',
        'root ::= a\na ::= "x" | a "y"',
        'root ::= ("a" | "b"){0} "c" ("d"?)* "" e\ne ::= [\\d\\w\\s]',
        'root ::= [^] [-a] [a-] "end"',
    ]
    body = {"messages": ASK, "max_tokens": 8, "temperature": 1.0}
    for grammar in grammars:
        r = httpx.post(engine_url + CHAT, json={**body, "guided_grammar": grammar}, timeout=60)
        assert r.status_code == 200, (grammar, r.text)
        assert httpx.get(engine_url + "/health", timeout=10).status_code == 200, grammar


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
