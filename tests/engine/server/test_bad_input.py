"""Bad requests get OpenAI error JSON with the right status, and the engine keeps serving."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

MSG = [{"role": "user", "content": "hi"}]
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"

CASES: list[tuple[str, str, Any, int, str | None]] = [
    # (id, path, body (str = raw), status, param)
    ("malformed json", CHAT, '{"messages": [', 400, None),
    ("body not an object", CHAT, "[1, 2]", 400, None),
    ("messages missing", CHAT, {"max_tokens": 3}, 400, "messages"),
    ("messages empty", CHAT, {"messages": []}, 400, "messages"),
    ("messages wrong type", CHAT, {"messages": 42}, 400, "messages"),
    ("bad role", CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role"),
    ("temperature wrong type", CHAT, {"messages": MSG, "temperature": "hot"}, 400, "temperature"),
    ("temperature out of range", CHAT, {"messages": MSG, "temperature": 5}, 400, "temperature"),
    ("max_tokens negative", CHAT, {"messages": MSG, "max_tokens": -1}, 400, "max_tokens"),
    ("max_tokens over context", CHAT, {"messages": MSG, "max_tokens": 100000}, 400, "max_tokens"),
    (
        "max_completion_tokens over context",
        CHAT,
        {"messages": MSG, "max_completion_tokens": 9000},
        400,
        "max_completion_tokens",
    ),
    ("unknown model", CHAT, {"model": "gpt-17", "messages": MSG}, 404, "model"),
    ("unknown parameter", CHAT, {"messages": MSG, "frobnicate": True}, 400, "frobnicate"),
    ("n above best_of_limit", CHAT, {"messages": MSG, "n": 50, "max_tokens": 2}, 400, "n"),
    ("best_of below n", CHAT, {"messages": MSG, "n": 3, "best_of": 2, "max_tokens": 2}, 400, "best_of"),
    ("best_of above limit", COMP, {"prompt": "a", "best_of": 21, "max_tokens": 2}, 400, "best_of"),
    ("best_of with stream", COMP, {"prompt": "a", "best_of": 2, "stream": True}, 400, "best_of"),
    ("top_logprobs above 20", CHAT, {"messages": MSG, "logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
    ("top_logprobs without logprobs", CHAT, {"messages": MSG, "top_logprobs": 2}, 400, "top_logprobs"),
    ("completion logprobs above the cap", COMP, {"prompt": "a", "logprobs": 21}, 400, "logprobs"),
    ("prompt_logprobs above the cap", COMP, {"prompt": "a", "prompt_logprobs": 21}, 400, "prompt_logprobs"),
    ("chat prompt_logprobs above the cap", CHAT, {"messages": MSG, "prompt_logprobs": 50}, 400, "prompt_logprobs"),
    ("max_tokens 0 without echo", COMP, {"prompt": "a", "max_tokens": 0}, 400, "max_tokens"),
    ("token id outside the vocabulary", COMP, {"prompt": [1, 99999], "max_tokens": 1}, 400, "prompt[1]"),
    ("negative token id", COMP, {"prompt": [5, -1], "max_tokens": 0, "echo": True, "logprobs": 0}, 400, "prompt"),
    (
        "scoring a prompt over context",
        COMP,
        {"prompt": [42] * 9000, "max_tokens": 0, "echo": True, "logprobs": 1},
        400,
        "prompt",
    ),
    (
        "top logprobs with best_of",
        COMP,
        {"prompt": "a", "best_of": 2, "logprobs": 2, "max_tokens": 2},
        400,
        "best_of",
    ),
    (
        "json_schema without schema",
        CHAT,
        {"messages": MSG, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
        400,
        "response_format.json_schema",
    ),
    (
        "response_format unknown type",
        CHAT,
        {"messages": MSG, "response_format": {"type": "yaml"}},
        400,
        "response_format.type",
    ),
    (
        "invalid json schema",
        CHAT,
        {
            "messages": MSG,
            "max_tokens": 5,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "wizard"}}},
        },
        400,
        "response_format.json_schema.schema",
    ),
    (
        "invalid tool parameters schema",
        CHAT,
        {
            "messages": MSG,
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 7}}}],
        },
        400,
        "tools[0].function.parameters",
    ),
    ("unsupported logit_bias", CHAT, {"messages": MSG, "logit_bias": {"5": 1}}, 400, "logit_bias"),
    (
        "tool_choice names an unknown function",
        CHAT,
        {
            "messages": MSG,
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "g"}},
        },
        400,
        "tool_choice",
    ),
    (
        "tool_choice required without tools",
        CHAT,
        {"messages": MSG, "tool_choice": "required"},
        400,
        "tool_choice",
    ),
    ("tool without a name", CHAT, {"messages": MSG, "tools": [{"type": "function", "function": {}}]}, 400, None),
    (
        "image content",
        CHAT,
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]},
        400,
        "messages[0].content[0]",
    ),
    ("prompt missing", COMP, {"max_tokens": 3}, 400, "prompt"),
    ("prompt empty", COMP, {"prompt": ""}, 400, "prompt"),
    ("prompt over context", COMP, {"prompt": "word " * 9000}, 400, "prompt"),
    ("unsupported suffix", COMP, {"prompt": "a", "suffix": "b"}, 400, "suffix"),
    ("stop wrong type", COMP, {"prompt": "a", "stop": 3}, 400, "stop"),
]


@pytest.mark.parametrize(("case", "path", "body", "status", "param"), CASES, ids=[c[0] for c in CASES])
def test_bad_input(engine_url: str, case: str, path: str, body: Any, status: int, param: str | None) -> None:
    if isinstance(body, str):
        r = httpx.post(engine_url + path, content=body, headers={"content-type": "application/json"}, timeout=30)
    else:
        r = httpx.post(engine_url + path, json=body, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]
    if param is not None:
        assert err["param"] == param, err
    # the engine is still healthy and serving
    assert httpx.get(engine_url + "/health", timeout=10).status_code == 200


def test_neutral_values_of_unsupported_parameters_are_accepted(engine_url: str) -> None:
    body = {
        "messages": MSG,
        "max_tokens": 2,
        "n": 1,
        "logprobs": False,
        "presence_penalty": 0,
        "response_format": {"type": "text"},
        "user": "alice",
        "tool_choice": "none",
    }
    r = httpx.post(engine_url + CHAT, json=body, timeout=60)
    assert r.status_code == 200, r.text


def test_unknown_path_is_openai_404(engine_url: str) -> None:
    r = httpx.get(engine_url + "/v1/nothing-here")
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "not_found_error"
