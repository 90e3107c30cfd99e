"""Structured output through the microservice: vLLM's fields pass through, and every reply parses."""

from __future__ import annotations

import re

import httpx
import pytest

from support.structured_cases import check_every_case


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "streamed"])
async def test_every_structured_reply_through_the_microservice_parses(microservice_url: str, stream: bool) -> None:
    await check_every_case("the microservice", microservice_url, stream)


def test_opea_string_messages_keep_their_constraint(microservice_url: str) -> None:
    body = {"messages": "The weather today is", "guided_regex": r"(sunny|rainy), [0-9]{1,2} degrees", "max_tokens": 40}
    r = httpx.post(microservice_url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["object"] == "text_completion"
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert re.fullmatch(r"(sunny|rainy), [0-9]{1,2} degrees", reply["choices"][0]["text"])


def test_a_constraint_the_engine_refuses_is_a_400_naming_it(microservice_url: str) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "structured_outputs": {"regex": "a(?=b)"}}
    r = httpx.post(microservice_url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "structured_outputs.regex"
