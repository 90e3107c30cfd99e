"""Hermes/Qwen tool calls (``<tool_call>{...}</tool_call>``): whole replies and streamed ones, fed in
every possible split, so that a call is found however the tokens cut its markup and JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from genmesh.engine.grammar import GrammarLimits
from genmesh.engine.openai import tools
from genmesh.engine.openai.hermes_stream import ArgsDelta, CallStart, HermesStream, Piece
from genmesh.protocol import ChatCompletionRequest, OpenAIError
from support import call_stream
from support.structured_cases import WEATHER_TOOL

CALL_A = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}\n</tool_call>'
CALL_B = '<tool_call>{"name": "get_time", "arguments": {"tz": "Europe/Oslo"}}</tool_call>'
BROKEN = '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>'
# Without the markup, as Qwen2.5-Coder 1.5B answers greedily: a call when it opens the reply.
BARE = '{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}'


def _run(text: str, cuts: list[int]) -> list[Piece]:
    return call_stream.run(HermesStream(), text, cuts)


def _splits(text: str) -> list[list[int]]:
    """Every single cut, every pair of neighbouring cuts, and one piece per character."""
    n = len(text)
    return [[i] for i in range(n)] + [[i, i + 1] for i in range(n - 1)] + [list(range(1, n))]


@pytest.mark.parametrize(
    "text",
    [f"Checking. {CALL_A}", f"{CALL_A}\n{CALL_B}", f"{CALL_A} and {CALL_B} done", BARE, f" {BARE}\nDone. {CALL_B}"],
)
def test_streamed_calls_equal_the_whole_reply_parse_for_every_split(text: str) -> None:
    whole_content, whole_calls = tools.parse_hermes(text)
    expected = [(c.function.name, json.loads(c.function.arguments)) for c in whole_calls]
    for cuts in _splits(text):
        content, calls = call_stream.folded(_run(text, cuts))
        assert "tool_call>" not in content
        assert [(n, json.loads(a)) for n, a in calls] == expected, cuts
        assert content.split() == (whole_content or "").split(), cuts


def test_arguments_stream_in_fragments_before_the_call_closes() -> None:
    stream = HermesStream()
    pieces = stream.feed('<tool_call>{"name": "get_weather", "arguments": {"city": "Os')
    assert isinstance(pieces[0], CallStart)
    assert pieces[0].name == "get_weather"
    assert pieces[1:] == [ArgsDelta(0, '{"city": "Os')]
    assert stream.feed('lo"}') == [ArgsDelta(0, 'lo"')]  # the closing braces may be the call object's: held back
    assert stream.feed("}</tool_call> ok", final=True) == [ArgsDelta(0, "}"), " ok"]


def test_a_block_that_is_not_a_call_is_content_markup_and_all() -> None:
    text = "<tool_call>just words</tool_call> after"
    for cuts in _splits(text):
        assert call_stream.folded(_run(text, cuts)) == (text, [])


def test_text_without_calls_passes_through_unchanged() -> None:
    text = "No tools needed: <tool is a word> and <tool_ was cut."
    for cuts in _splits(text):
        assert call_stream.folded(_run(text, cuts)) == (text, [])


def test_malformed_json_inside_tags_is_left_as_content_in_a_whole_reply() -> None:
    content, calls = tools.parse_hermes(f"{CALL_A} {BROKEN}")
    assert [c.function.name for c in calls] == ["get_weather"]
    assert content == BROKEN
    assert tools.parse_hermes(BROKEN) == (BROKEN, [])


def test_several_calls_get_their_own_ids() -> None:
    _, calls = tools.parse_hermes(f"{CALL_A}{CALL_B}{CALL_A}")
    assert [c.function.name for c in calls] == ["get_weather", "get_time", "get_weather"]
    assert len({c.id for c in calls}) == 3


def _request(choice: Any) -> ChatCompletionRequest:
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    return ChatCompletionRequest.model_validate({"messages": messages, "tools": [WEATHER_TOOL], "tool_choice": choice})


def test_the_parser_flag_overrides_the_template() -> None:
    llama = "{{ tools }}<|start_header_id|>"
    assert tools.plan_tools(_request("auto"), llama, GrammarLimits()).format == "llama3_json"  # type: ignore[union-attr]
    for name in ("hermes", "hermes3"):
        plan = tools.plan_tools(_request("auto"), llama, GrammarLimits(), parser=name)
        assert plan is not None
        assert (plan.format, plan.native) == ("hermes", True)


def test_auto_tool_choice_off_refuses_auto_but_not_forced_calls() -> None:
    with pytest.raises(OpenAIError) as err:
        tools.plan_tools(_request("auto"), "", GrammarLimits(), parser="hermes", auto_tool_choice=False)
    assert (err.value.status, err.value.param) == (400, "tool_choice")
    plan = tools.plan_tools(_request("required"), "", GrammarLimits(), parser="hermes", auto_tool_choice=False)
    assert plan is not None
    assert plan.mode == "required"
    assert plan.constraint is not None


def test_a_bare_call_opening_the_reply_is_a_call_and_other_json_is_content() -> None:
    assert call_stream.folded(_run(BARE, [7]))[1] == [("get_weather", '{"city": "Oslo", "unit": "C"}')]
    for text in ('{"answer": 42} is the JSON', f"Here: {BARE}", '{"name": "x"}'):
        assert call_stream.folded(_run(text, [3])) == (text, []), text
        assert tools.parse_hermes(text) == (text, []), text
