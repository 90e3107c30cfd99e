"""Tool calls without the engine: planning from a request and a chat template, parsing replies."""

from __future__ import annotations

import json
from typing import Any

from genmesh.engine.grammar import GrammarLimits, parse_ebnf
from genmesh.engine.openai import tools
from genmesh.protocol import ChatCompletionRequest
from support.grammar_walk import matches
from support.structured_cases import TIME_TOOL, WEATHER_TOOL

WEATHER = WEATHER_TOOL
TIME = TIME_TOOL
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def plan(choice: Any = "auto", template: str = "") -> tools.ToolPlan:
    req = ChatCompletionRequest.model_validate({"messages": ASK, "tools": [WEATHER, TIME], "tool_choice": choice})
    p = tools.plan_tools(req, template, GrammarLimits())
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


def test_a_tool_without_parameters_takes_no_arguments() -> None:
    bare = {"type": "function", "function": {"name": "ping"}}
    req = ChatCompletionRequest.model_validate({"messages": ASK, "tools": [bare], "tool_choice": "required"})
    p = tools.plan_tools(req, "", GrammarLimits())
    assert p is not None
    assert p.constraint is not None
    assert p.constraint.grammar is not None
    grammar = parse_ebnf(p.constraint.grammar, GrammarLimits().max_repeat)
    assert matches(grammar, '{"name": "ping", "arguments": {}}')
    assert not matches(grammar, '{"name": "ping", "arguments": {"a": 1}}')


def test_tool_choice_none_means_no_plan() -> None:
    req = ChatCompletionRequest.model_validate({"messages": ASK, "tools": [WEATHER], "tool_choice": "none"})
    assert tools.plan_tools(req, "", GrammarLimits()) is None
