"""Structured output through the whole mesh, and real structured-output clients at the engine and the gateway.

The gateway passes bodies through untouched, so what the engine guarantees (every reply that
ends parses and meets its schema) must hold at the gateway too, with the same clients.
"""

from __future__ import annotations

from typing import Any

import instructor
import openai
import pytest
from pydantic import BaseModel, Field
from pydantic_ai import Agent, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import UsageLimits

from support.servers import MODEL_NAME, Server
from support.structured_cases import check_every_case


@pytest.fixture
def mesh_gateway(start_gateway: Any, mesh_microservice: Server) -> str:
    ups = [{"url": mesh_microservice.url, "max_concurrency": 8, "health_path": "/v1/health_check"}]
    gateway: Server = start_gateway({MODEL_NAME: {"upstreams": ups}})
    return gateway.url


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "streamed"])
async def test_every_structured_reply_through_the_gateway_parses(mesh_gateway: str, stream: bool) -> None:
    await check_every_case("the gateway", mesh_gateway, stream)


class Cat(BaseModel):
    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=30)
    indoor: bool


ASK_CAT = [{"role": "user", "content": "Invent a cat: its name, age and whether it lives indoors."}]


@pytest.fixture(params=["engine", "gateway"])
def base_url(request: pytest.FixtureRequest) -> str:
    """The engine itself, or the gateway in front of microservice and engine."""
    if request.param == "engine":
        url: str = request.getfixturevalue("engine_url")
        return url
    url = request.getfixturevalue("mesh_gateway")
    return url


@pytest.mark.parametrize("mode", [instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA], ids=["tools", "json_schema"])
def test_instructor_returns_a_validated_object(base_url: str, mode: instructor.Mode) -> None:
    client = instructor.from_openai(openai.OpenAI(base_url=base_url + "/v1", api_key="unused"), mode=mode)
    for seed in range(3):  # sampled: every sample must validate on the first try
        cat = client.chat.completions.create(
            model=MODEL_NAME,
            response_model=Cat,
            messages=ASK_CAT,  # type: ignore[arg-type]
            max_tokens=300,
            temperature=1.0,
            seed=seed,
            max_retries=0,
        )
        assert isinstance(cat, Cat)


def test_pydantic_ai_agent_with_a_tool_returns_its_typed_output(base_url: str) -> None:
    model = OpenAIChatModel(MODEL_NAME, provider=OpenAIProvider(base_url=base_url + "/v1", api_key="unused"))
    agent = Agent(model, output_type=Cat, model_settings={"temperature": 0, "max_tokens": 300})
    looked_up: list[str] = []

    async def first_step_only(ctx: RunContext[None], tool: ToolDefinition) -> ToolDefinition | None:
        return tool if ctx.run_step <= 1 else None  # then only the output tool is left: the run ends

    @agent.tool_plain(prepare=first_step_only)
    def favourite_cat_name(colour: str) -> str:
        """The favourite name for a cat of the given colour."""
        looked_up.append(colour)
        return "Tom"

    result = agent.run_sync(
        "Look up a favourite cat name, then invent that cat.", usage_limits=UsageLimits(request_limit=4)
    )
    assert isinstance(result.output, Cat)
    calls = [p for m in result.all_messages() for p in getattr(m, "parts", []) if p.part_kind == "tool-call"]
    assert calls, "the agent made no tool call: its output was not a validated tool call either"
    for call in calls:
        assert call.tool_name in ("favourite_cat_name", "final_result")
    assert len(looked_up) == sum(c.tool_name == "favourite_cat_name" for c in calls)
