"""Qwen3-Coder's XML tool calls (``<tool_call><function=NAME><parameter=KEY>...``): whole replies and
streamed ones fed in every split, typed values, the parser's names, prompting and history."""

from __future__ import annotations

import asyncio
import json
import random
import typing
from collections.abc import AsyncIterator
from typing import Any

import pytest

from genmesh.engine.client.generation import Event, Finished
from genmesh.engine.client.n_choices import Reply
from genmesh.engine.grammar import GrammarLimits
from genmesh.engine.models.ovms_graph import ToolParser
from genmesh.engine.openai import qwen3coder, tools
from genmesh.engine.openai.hermes_stream import ArgsDelta, CallStart, Piece
from genmesh.engine.openai.qwen3coder import Qwen3CoderStream
from genmesh.engine.openai.routes import chat
from genmesh.engine.settings import EngineSettings
from genmesh.protocol import ChatCompletionChunk, ChatCompletionRequest, ToolDefinition
from support import call_stream
from support.structured_cases import TIME_TOOL, WEATHER_TOOL

TYPED_TOOL = {
    "type": "function",
    "function": {
        "name": "book",
        "parameters": {
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "count": {"type": "integer"},
                "price": {"type": "number"},
                "urgent": {"type": "boolean"},
                "options": {"type": "object"},
                "tags": {"type": "array"},
                "note": {"type": ["string", "null"]},
                "size": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                "level": {"enum": [1, 2, 3]},
            },
        },
    },
}
TOOLS = [ToolDefinition.model_validate(t) for t in (WEATHER_TOOL, TIME_TOOL, TYPED_TOOL)]


def xml(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


CALL_A = xml("get_weather", city="Paris", unit="C")
CALL_B = xml("get_time", zone="Europe/Oslo")
# A value with inner newlines, '<' and markup-like text that is not a parameter's close.
CODE = "if a < b:\n    print('<tool_call>')\n<div>x</div>\n"
CALL_CODE = xml("book", title=CODE, count="2")


def parse(text: str) -> tuple[str | None, list[tuple[str, Any]]]:
    content, calls = qwen3coder.parse(text, TOOLS)
    return content, [(c.function.name, json.loads(c.function.arguments)) for c in calls]


def test_one_call_is_a_call_and_no_content() -> None:
    assert parse(CALL_A) == (None, [("get_weather", {"city": "Paris", "unit": "C"})])


def test_two_calls_and_text_before_them() -> None:
    content, calls = parse(f"Let me check both.\n{CALL_A}\n{CALL_B}")
    assert content == "Let me check both."
    assert calls == [("get_weather", {"city": "Paris", "unit": "C"}), ("get_time", {"zone": "Europe/Oslo"})]


def test_calls_get_their_own_ids() -> None:
    _, calls = qwen3coder.parse(CALL_A + CALL_A + CALL_B, TOOLS)
    assert len({c.id for c in calls}) == 3
    assert all(c.id.startswith("call_") for c in calls)


def test_a_value_keeps_inner_newlines_and_angle_brackets() -> None:
    _, calls = parse(CALL_CODE)
    assert calls == [("book", {"title": CODE, "count": 2})]


def test_exactly_one_newline_is_stripped_each_side() -> None:
    text = "<tool_call><function=get_time><parameter=zone>\n\n UTC \n\n</parameter></function></tool_call>"
    assert parse(text)[1] == [("get_time", {"zone": "\n UTC \n"})]
    inline = "<tool_call><function=get_time><parameter=zone>UTC</parameter></function></tool_call>"
    assert parse(inline)[1] == [("get_time", {"zone": "UTC"})]


@pytest.mark.parametrize(
    ("param", "raw", "value"),
    [
        ("title", "42", "42"),  # string: as written, even when it reads as JSON
        ("title", "true", "true"),
        ("count", "7", 7),
        ("count", "-3", -3),
        ("count", "7.5", "7.5"),  # not an integer: the text
        ("count", "seven", "seven"),
        ("count", "9" * 5000, "9" * 5000),  # past Python's int digits limit: the text, not an error
        ("price", "9.99", 9.99),
        ("price", "10", 10),
        ("price", "1e3", 1000.0),
        ("price", "NaN", "NaN"),  # not JSON: the text
        ("price", "1e999", "1e999"),  # not finite
        ("urgent", "true", True),
        ("urgent", "FALSE", False),
        ("urgent", "yes", "yes"),
        ("options", '{"a": [1, 2]}', {"a": [1, 2]}),
        ("options", "[1]", "[1]"),  # an array is not an object
        ("options", "{broken", "{broken"),
        ("tags", '["x", "y"]', ["x", "y"]),
        ("tags", "x, y", "x, y"),
        ("note", "null", None),  # the schema allows null
        ("note", "a note", "a note"),
        ("size", "12", 12),  # anyOf: the integer branch first
        ("size", "large", "large"),
        ("level", "2", 2),  # enum of integers
        ("unknown", '{"k": 1}', {"k": 1}),  # not in the schema: JSON when it parses
        ("unknown", "3", 3),
        ("unknown", "plain words", "plain words"),
    ],
)
def test_values_are_typed_by_the_tool_schema(param: str, raw: str, value: Any) -> None:
    _, calls = parse(xml("book", **{param: raw}))
    assert calls == [("book", {param: value})]
    assert type(calls[0][1][param]) is type(value)


def test_an_enum_of_strings_keeps_digits_as_text() -> None:
    tool = ToolDefinition.model_validate(
        {"type": "function", "function": {"name": "f", "parameters": {"properties": {"v": {"enum": ["1", "2"]}}}}}
    )
    _, calls = qwen3coder.parse(xml("f", v="1"), [tool])
    assert json.loads(calls[0].function.arguments) == {"v": "1"}


def test_an_unknown_function_or_a_tool_without_parameters_reads_values_as_json_or_text() -> None:
    assert parse(xml("nowhere", n="5", s="word"))[1] == [("nowhere", {"n": 5, "s": "word"})]
    bare = ToolDefinition.model_validate({"type": "function", "function": {"name": "ping"}})
    _, calls = qwen3coder.parse(xml("ping", flag="false"), [bare])
    assert json.loads(calls[0].function.arguments) == {"flag": False}
    _, calls = qwen3coder.parse("<tool_call>\n<function=ping>\n</function>\n</tool_call>", [bare])
    assert calls[0].function.arguments == "{}"


def test_arguments_are_a_json_object_string_with_unicode_as_written() -> None:
    _, calls = qwen3coder.parse(xml("get_weather", city="Zürich"), TOOLS)
    assert calls[0].function.arguments == '{"city": "Zürich"}'


def test_a_missing_parameter_close_ends_at_the_next_parameter() -> None:
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n<parameter=unit>\nC\n</function>\n</tool_call>"
    assert parse(text)[1] == [("get_weather", {"city": "Oslo", "unit": "C"})]


@pytest.mark.parametrize(
    "block",
    [
        "<tool_call>\n<parameter=city>\nOslo\n</parameter>\n</tool_call>",  # no <function=...>
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOs",  # cut by max_tokens
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</tool_call>",  # no </function>
        "<tool_call>\n<function=>\n</function>\n</tool_call>",  # no name
        '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',  # Hermes JSON, not this format
        "<tool_call></tool_call>",
        f"<tool_call>\n<function={'f' * 300}>\n</function>\n</tool_call>",  # a name too long to be one
    ],
)
def test_a_malformed_block_stays_content(block: str) -> None:
    assert parse(block) == (block, [])
    content, calls = parse(f"{CALL_B} then {block}")
    assert (content, [n for n, _ in calls]) == (f"then {block}", ["get_time"])


def test_text_after_a_blocks_last_function_is_content_without_markup() -> None:
    text = "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\noops\n</tool_call> end"
    assert parse(text) == ("oops\n end", [("get_time", {"zone": "UTC"})])


def test_two_functions_in_one_block_are_two_calls() -> None:
    text = "<tool_call>\n<function=get_time>\n</function>\n<function=get_time>\n</function>\n</tool_call>"
    assert [n for n, _ in parse(text)[1]] == ["get_time", "get_time"]


def test_text_without_calls_is_returned_unchanged() -> None:
    for text in ("It is sunny.", "  padded  ", "a <tool_c and <function=x>"):
        assert qwen3coder.parse(text, TOOLS) == (text, [])


# Streaming


def _run(text: str, cuts: list[int]) -> list[Piece]:
    return call_stream.run(Qwen3CoderStream(TOOLS), text, cuts)


def _splits(text: str, seed: int) -> list[list[int]]:
    """Every single cut, one piece per character, and random chunk sizes."""
    n, rng = len(text), random.Random(seed)
    randoms = []
    for _ in range(30):
        cuts, at = [], 0
        while (at := at + rng.randint(1, 12)) < n:
            cuts.append(at)
        randoms.append(cuts)
    return [[i] for i in range(n)] + [list(range(1, n))] + randoms


STREAMED = [
    CALL_A,
    f"Checking the weather. {CALL_A}",
    f"{CALL_A}\n{CALL_B}",
    f"Both: {CALL_A} and {CALL_CODE} done",
    xml("book", count="3", urgent="true", options='{"a": 1}', unknown="x"),
    "No tools needed: <tool is a word> and <tool_ was cut.",
    "<tool_call>\n<function=get_time>\n</function>\n<function=get_time>\n</function>\n</tool_call>",
    "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\noops\n</tool_call> end",
    "<tool_call>\n<parameter=city>\nOslo\n</parameter>\n</tool_call> after",
    f"{CALL_B} <tool_call>junk</tool_call>",
    f"<tool_call>\n<function={'f' * 300}>\n</function>\n</tool_call> {CALL_B}",
]


@pytest.mark.parametrize("text", STREAMED)
def test_streamed_calls_equal_the_whole_reply_parse_for_every_split(text: str) -> None:
    whole_content, whole_calls = parse(text)
    for cuts in _splits(text, seed=len(text)):
        content, calls = call_stream.folded(_run(text, cuts))
        assert [(n, json.loads(a)) for n, a in calls] == whole_calls, cuts
        assert content.strip() == (whole_content or "").strip(), cuts
        for tag in ("<tool_call>", "<function=", "</function>"):  # no markup beyond the malformed blocks'
            assert content.count(tag) == (whole_content or "").count(tag), (tag, cuts)


def test_a_call_starts_once_its_name_is_complete_and_its_arguments_go_out_when_it_closes() -> None:
    stream = Qwen3CoderStream(TOOLS)
    assert stream.feed("Sure. <tool_c") == ["Sure. "]  # a partial tag is held back
    assert stream.feed("all>\n<function=get_wea") == []
    start = stream.feed("ther>\n<parameter=city>\nOslo\n</parameter>\n")
    assert len(start) == 1
    assert isinstance(start[0], CallStart)
    assert (start[0].index, start[0].name) == (0, "get_weather")
    assert stream.calls == 1
    assert stream.feed("</funct") == []
    assert stream.feed("ion>\n</tool_call>") == [ArgsDelta(0, '{"city": "Oslo"}')]
    assert stream.feed(" Done.", final=True) == [" Done."]


def test_a_call_cut_at_the_end_sends_the_parameters_closed_by_then() -> None:
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=unit>\nC"
    for cuts in _splits(text, seed=1):
        assert call_stream.folded(_run(text, cuts)) == ("", [("get_weather", '{"city": "Oslo"}')]), cuts
    assert parse(text) == (text, [])  # the whole reply keeps it as content


def test_markup_never_leaks_as_content_while_a_call_is_written() -> None:
    text = f"Hi {CALL_A}"
    stream = Qwen3CoderStream(TOOLS)
    sent = ""
    for ch in text:
        sent += "".join(p for p in stream.feed(ch) if isinstance(p, str))
        assert "<" not in sent
    assert sent == "Hi "


# The parser's names, settings, graph.pbtxt, planning and prompting


def _request(choice: Any, messages: list[dict[str, Any]] | None = None) -> ChatCompletionRequest:
    messages = messages or [{"role": "user", "content": "Weather in Oslo?"}]
    return ChatCompletionRequest.model_validate({"messages": messages, "tools": [WEATHER_TOOL], "tool_choice": choice})


def test_both_names_mean_the_format() -> None:
    assert tools.PARSERS["qwen3_coder"] == tools.PARSERS["qwen3coder"] == "qwen3coder"
    for name in ("qwen3_coder", "qwen3coder"):
        plan = tools.plan_tools(_request("auto"), "{{ tools }}", GrammarLimits(), parser=name)
        assert plan is not None
        assert (plan.format, plan.native, plan.constraint) == ("qwen3coder", True, None)  # auto: no grammar


def test_a_template_that_teaches_the_xml_form_picks_it_without_a_flag() -> None:
    qwen3_coder = "{% for tool in tools %}{{ tool }}{% endfor %}<tool_call>\n<function=example>\n<parameter=a>\n"
    assert tools.template_format(qwen3_coder) == ("qwen3coder", True)
    assert tools.template_format(qwen3_coder, parser="hermes") == ("hermes", True)  # a flag wins
    assert tools.template_format("{{ tools }}<tool_call>") == ("hermes", True)
    assert tools.template_format("<function=x><parameter=y>")[0] == "hermes"  # renders no tools: not its own form


def test_every_parser_name_the_settings_and_the_graph_take_is_known() -> None:
    setting = EngineSettings.model_fields["tool_call_parser"].annotation
    names = {a for arg in typing.get_args(setting) for a in typing.get_args(arg)}
    assert {"qwen3_coder", "qwen3coder"} <= names
    assert names <= set(tools.PARSERS)
    assert set(typing.get_args(ToolParser)) <= names


@pytest.mark.parametrize("name", ["qwen3_coder", "qwen3coder"])
def test_the_settings_accept_both_names(name: str) -> None:
    assert EngineSettings(tool_call_parser=name).tool_call_parser == name  # type: ignore[arg-type]


def test_auto_replies_are_parsed_in_this_format() -> None:
    plan = tools.plan_tools(_request("auto"), "", GrammarLimits(), parser="qwen3coder")
    assert plan is not None
    content, calls = tools.parse(f"Checking. {CALL_A}", plan)
    assert content == "Checking."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris", "unit": "C"})
    ]


def test_forced_calls_keep_the_json_grammar_in_this_format() -> None:
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        plan = tools.plan_tools(_request(choice), "", GrammarLimits(), parser="qwen3_coder")
        assert plan is not None
        assert plan.constraint is not None
        assert plan.constraint.grammar is not None
        content, calls = tools.parse('{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}', plan)
        assert content is None
        assert json.loads(calls[0].function.arguments) == {"city": "Oslo", "unit": "C"}
        assert "one function call as a JSON object" in tools.system_prompt(plan)


def test_the_system_prompt_describes_the_xml_calls_when_the_template_cannot() -> None:
    plan = tools.plan_tools(_request("auto"), "", GrammarLimits(), parser="qwen3coder")
    assert plan is not None
    prompt = tools.system_prompt(plan)
    assert "<function=<function-name>>" in prompt
    assert "<parameter=<parameter-name>>" in prompt
    assert '"arguments"' not in prompt
    assert '"get_weather"' in prompt  # the tool listing
    hermes = tools.plan_tools(_request("auto"), "", GrammarLimits(), parser="hermes")
    assert hermes is not None
    assert "<function=" not in tools.system_prompt(hermes)


def test_earlier_calls_are_rendered_as_xml_in_the_history() -> None:
    earlier = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "book", "arguments": '{"title": "Dune", "count": 2, "urgent": true}'},
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": "call_1", "content": "booked"}
    req = _request("auto", [{"role": "user", "content": "Book Dune twice"}, earlier, result])
    plan = tools.plan_tools(req, "", GrammarLimits(), parser="qwen3coder")
    assert plan is not None
    rendered = tools.history(req.messages, plan)
    text = rendered[2]["content"]
    assert text == xml("book", title="Dune", count="2", urgent="true")
    # and it reads back as the call it was
    typed = ToolDefinition.model_validate(TYPED_TOOL)
    assert json.loads(qwen3coder.parse(text, [typed])[1][0].function.arguments) == {
        "title": "Dune",
        "count": 2,
        "urgent": True,
    }
    native = tools.plan_tools(req, "{{ tools }}", GrammarLimits(), parser="qwen3coder")
    assert native is not None
    native_history = tools.history(req.messages, native)
    assert native_history[1]["tool_calls"][0]["function"]["arguments"] == {"title": "Dune", "count": 2, "urgent": True}


def test_the_chat_route_streams_qwen3coder_calls_as_openai_deltas() -> None:
    """The chat writer with this format (no engine: the reply's text pieces are fed as events)."""
    plan = tools.plan_tools(_request("auto"), "{{ tools }}", GrammarLimits(), parser="qwen3_coder")
    assert plan is not None
    reply = Reply("chatcmpl-1", "m", 0, 1, 10, False)
    writer = chat._Writer(None, reply, plan, False, 0, None)  # type: ignore[arg-type]  # no logprobs: no tokenizer
    text = f"Checking. {CALL_A}"
    pieces = [text[i : i + 5] for i in range(0, len(text), 5)]

    async def events() -> AsyncIterator[tuple[int, Event]]:
        for piece in pieces:
            yield 0, piece
        yield 0, Finished("stop", 10, 20)

    async def collect() -> list[ChatCompletionChunk]:
        return [c async for c in writer.chunks(events(), (None,))]  # type: ignore[arg-type]

    chunks = asyncio.run(collect())
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    deltas = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
    assert content == "Checking. "
    assert [d.function.name for d in deltas if d.id is not None] == ["get_weather"]  # type: ignore[union-attr]
    # incremental: the call's start (its arguments empty) goes out before its arguments
    assert [(d.id is not None, d.function.arguments == "") for d in deltas] == [(True, True), (False, False)]  # type: ignore[union-attr]
    args = "".join(d.function.arguments or "" for d in deltas)  # type: ignore[union-attr]
    assert json.loads(args) == {"city": "Paris", "unit": "C"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    whole = chat._choice(0, text, "stop", None, plan)
    assert (whole.message.content, whole.finish_reason) == ("Checking.", "tool_calls")
    assert [c.function.name for c in whole.message.tool_calls or []] == ["get_weather"]
