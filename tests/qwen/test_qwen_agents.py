"""The openai-agents SDK runs one real tool round trip through the whole mesh (gateway :8888 ->
microservice -> engine) on Qwen2.5-Coder 1.5B: the model chooses the tool itself (``tool_choice``
auto, Hermes calls), the SDK runs it and sends the result back, and the model answers in words
from that result."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from support.mesh import Mesh, launch, wait_up
from support.qwen import QWEN_15B, QWEN_ARGS, QWEN_NAME

TEMPERATURE_C = "17"  # what the tool answers: a figure the model cannot guess


@pytest.fixture(scope="module")
def qwen_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    mesh = launch(
        tmp_path_factory.mktemp("qwen-mesh"),
        "--embedding-model=none",
        "--whisper-model=none",
        "--speech-voice=none",
        "--startup-timeout-s=1800",
        engine_args=(*QWEN_ARGS, "--tool-call-parser", "hermes"),
        model=QWEN_15B,
        served_name=QWEN_NAME,
    )
    try:
        wait_up(mesh, timeout_s=1800)
        yield mesh
    finally:
        mesh.stop()


async def _round_trip(base_url: str, stream: bool) -> tuple[Any, list[str]]:
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current temperature of a city, in degrees Celsius."""
        calls.append(city)
        return f"{TEMPERATURE_C} degrees Celsius, light rain"

    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=900)
    agent = Agent(
        name="weather",
        instructions="Answer with the get_weather tool; give the temperature it returns.",
        tools=[get_weather],
        model=OpenAIChatCompletionsModel(model=QWEN_NAME, openai_client=client),
        model_settings=ModelSettings(temperature=0, max_tokens=160),
    )
    try:
        question = "What is the temperature in Paris right now?"
        if stream:
            run = Runner.run_streamed(agent, question)
            async for _ in run.stream_events():
                pass
            return run.final_output, calls
        result = await Runner.run(agent, question)
        return result.final_output, calls
    finally:
        await client.close()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_agent_calls_a_tool_and_answers_from_its_result_through_the_gateway(qwen_mesh: Mesh, stream: bool) -> None:
    output, calls = asyncio.run(_round_trip(qwen_mesh.url("gateway") + "/v1", stream))
    assert calls, "the model never called the tool"
    assert "paris" in calls[0].lower()
    assert isinstance(output, str)
    assert TEMPERATURE_C in output, output
