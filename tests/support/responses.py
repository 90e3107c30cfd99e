"""Helpers for the Responses API tests at every hop: a tool, event-order checks, the Agents SDK."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import openai

from support.servers import MODEL_NAME

CITY_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
TERMINAL = ("response.completed", "response.incomplete")
TOOL_RESULT = "SECRET-4242"


def assert_event_sequence(events: Sequence[Any]) -> Any:
    """Check a streamed response's events (SDK objects): numbering, order, items opened and closed;
    return the final response."""
    assert events, "no events"
    types = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events))), types
    assert types[:2] == ["response.created", "response.in_progress"], types
    assert types[-1] in TERMINAL, types
    assert sum(t in TERMINAL for t in types) == 1
    opened = [e.output_index for e in events if e.type == "response.output_item.added"]
    closed = [e for e in events if e.type == "response.output_item.done"]
    assert opened == [e.output_index for e in closed] == list(range(len(closed)))
    final = events[-1].response
    assert [i.id for i in final.output] == [e.item.id for e in closed]
    assert events[0].response.id == final.id
    return final


def stream_events(
    url: str, body: dict[str, Any], on_delta: Callable[[int], object] | None = None
) -> list[dict[str, Any]]:
    """A streamed response read with plain httpx: every event's JSON, checked against its ``event:`` line."""
    out: list[dict[str, Any]] = []
    kind = None
    deltas = 0
    with httpx.stream("POST", url, json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                event = json.loads(line[6:])
                assert event["type"] == kind, (event["type"], kind)
                out.append(event)
                if event["type"] == "response.output_text.delta":
                    deltas += 1
                    if on_delta is not None:
                        on_delta(deltas)
    return out


async def run_forced_tool_agent(base_url: str, stream: bool, api_key: str = "unused") -> tuple[Any, list[str]]:
    """An Agents SDK agent on its default (Responses) model, forced to call its one tool; it stops on
    the first tool result. Returns its final output and the arguments the tool was called with."""
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    calls: list[str] = []

    @function_tool
    def secret_number(city: str) -> str:
        """The secret number of a city."""
        calls.append(city)
        return TOOL_RESULT

    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    agent = Agent(
        name="secret-keeper",
        instructions="Use the tool to answer.",
        tools=[secret_number],
        model=OpenAIResponsesModel(model=MODEL_NAME, openai_client=client),
        # Greedy, with room: a sampled argument string can run on past a small budget.
        model_settings=ModelSettings(tool_choice="required", max_tokens=200, temperature=0),
        tool_use_behavior="stop_on_first_tool",
    )
    try:
        if stream:
            run = Runner.run_streamed(agent, "What is the secret number of Paris?")
            async for _ in run.stream_events():
                pass
            return run.final_output, calls
        result = await Runner.run(agent, "What is the secret number of Paris?")
        return result.final_output, calls
    finally:
        await client.close()
