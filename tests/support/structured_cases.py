"""Structured-output cases for property tests: every sampled reply must parse, validate and stop.

Each case is a request (without sampling parameters) and what its reply must satisfy. The same
cases run against the engine, the microservice and the gateway.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any

import httpx
import jsonschema

# Seeds per case: a few in ``make test``; ``make test-structured`` runs many.
SEEDS = int(os.environ.get("GENMESH_PROPERTY_SEEDS", "3"))
ROOM = 800  # max_tokens: room to finish (the longest reply measured at temperature 1.0 took 529)

FLAT = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 30},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
ORDER = {
    "type": "object",
    "properties": {
        "status": {"enum": ["open", "paid", "shipped"]},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string", "maxLength": 8}, "qty": {"type": "integer", "minimum": 1}},
                "required": ["sku", "qty"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["status", "items"],
    "additionalProperties": False,
}
PERSON = {
    "type": "object",
    "properties": {
        "height_m": {"type": "number", "minimum": 0, "maximum": 3},
        "weight_kg": {"type": "number"},
        "active": {"type": "boolean"},
        "nickname": {"type": ["string", "null"], "maxLength": 15},
    },
    "required": ["height_m", "weight_kg", "active", "nickname"],
    "additionalProperties": False,
}
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
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

TIME_TOOL = {
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


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _schema_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


@dataclass(frozen=True)
class Case:
    name: str
    body: dict[str, Any]
    schema: dict[str, Any] | None = None  # the reply's JSON must validate against it
    tool: bool = False  # the reply must be one call of a tool in ``body["tools"]``
    path: str = "/v1/chat/completions"
    # JSON mode has no schema to bound its text: a reply may be cut by max_tokens (OpenAI's JSON
    # mode promises the same); what it writes must still be valid JSON so far, with no free
    # whitespace. Counted separately in the report.
    may_run_long: bool = False


CASES = [
    Case("flat", {"messages": _user("Invent a cat."), "response_format": _schema_format("cat", FLAT)}, FLAT),
    Case(
        "nested",
        {"messages": _user("Write an order for two books."), "response_format": _schema_format("order", ORDER)},
        ORDER,
    ),
    Case(
        "numbers",
        {"messages": _user("Describe a person."), "response_format": _schema_format("person", PERSON)},
        PERSON,
    ),
    Case("unbounded_int", {"messages": _user("Name a big city."), "guided_json": CITY}, CITY),
    Case(
        "json_object",
        {
            "messages": _user("Describe a cat as JSON with keys name and age."),
            "response_format": {"type": "json_object"},
        },
        {"type": "object"},
        may_run_long=True,
    ),
    Case(
        "tool_call",
        {"messages": _user("What is the weather in Paris?"), "tools": [WEATHER_TOOL], "tool_choice": "required"},
        tool=True,
    ),
    Case(
        "completions",
        {"prompt": "A city as JSON:", "structured_outputs": {"json": CITY}},
        CITY,
        path="/v1/completions",
    ),
]


def reply_text(reply: dict[str, Any]) -> tuple[str, str]:
    """The generated text (or tool-call arguments) and finish_reason of a unary reply."""
    choice = reply["choices"][0]
    if "text" in choice:
        return choice["text"], choice["finish_reason"]
    message = choice["message"]
    return message.get("content") or "", choice["finish_reason"]


def check_reply(case: Case, status: int, reply: dict[str, Any]) -> str | None:
    """None when the reply meets the case, else what is wrong with it."""
    if status != 200:
        return f"HTTP {status}: {str(reply)[:200]}"
    if case.tool:
        choice = reply["choices"][0]
        calls = choice["message"].get("tool_calls") or []
        if choice["finish_reason"] != "tool_calls" or len(calls) != 1:
            return f"no single tool call: {str(choice)[:200]}"
        tools = {t["function"]["name"]: t["function"]["parameters"] for t in case.body["tools"]}
        fn = calls[0]["function"]
        if fn["name"] not in tools:
            return f"unknown tool {fn['name']!r}"
        return _validate(fn["arguments"], tools[fn["name"]])
    text, finish = reply_text(reply)
    if finish == "length" and case.may_run_long:
        return json_layout_problem(text)
    if finish != "stop":
        return f"finish_reason {finish!r}: {text[:120]!r}"
    assert case.schema is not None
    return _validate(text, case.schema)


def _validate(text: str, schema: dict[str, Any]) -> str | None:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (json.JSONDecodeError, jsonschema.ValidationError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]} in {text[:120]!r}"
    return None


def json_layout_problem(text: str) -> str | None:
    """None when ``text`` is (the start of) a JSON object with no whitespace outside strings but
    single spaces after ':' and ','."""
    if not text.startswith("{"):
        return f"not a JSON object: {text[:80]!r}"
    in_string = escaped = False
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
            elif ord(c) < 0x20:
                return f"raw control character in a string at {i}"
        elif c == '"':
            in_string = True
        elif c.isspace() and (c != " " or text[i - 1] not in ":,"):
            return f"free whitespace at {i}: {text[max(0, i - 20) : i + 20]!r}"
    return None


@dataclass
class Tally:
    case: str
    sent: int = 0
    valid: int = 0  # parsed, met its schema and ended with "stop" (or a tool call)
    cut: int = 0  # JSON mode only: valid so far, cut by max_tokens
    failures: list[str] | None = None


async def run_cases(base_url: str, cases: list[Case], seeds: int = SEEDS, stream: bool = False) -> list[Tally]:
    """Every case with ``seeds`` seeds at temperature 1.0, concurrently per case."""
    tallies = []
    async with httpx.AsyncClient(timeout=600) as client:
        for case in cases:
            tally = Tally(case.name, failures=[])

            async def one(seed: int, case: Case = case, tally: Tally = tally) -> None:
                body = {**case.body, "temperature": 1.0, "seed": seed, "max_tokens": ROOM}
                status, reply = await (_streamed if stream else _unary)(client, base_url + case.path, body)
                problem = check_reply(case, status, reply)
                tally.sent += 1
                finish = reply_text(reply)[1] if status == 200 and not case.tool else None
                if problem is not None:
                    assert tally.failures is not None
                    tally.failures.append(f"seed {seed}: {problem}")
                elif finish == "length":
                    tally.cut += 1
                else:
                    tally.valid += 1

            await asyncio.gather(*(one(seed) for seed in range(seeds)))
            tallies.append(tally)
    return tallies


async def _unary(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    r = await client.post(url, json=body)
    return r.status_code, r.json()


async def _streamed(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A streamed reply folded back into the shape of a unary one."""
    text, finish, calls = "", None, []
    async with client.stream("POST", url, json={**body, "stream": True}) as r:
        if r.status_code != 200:
            return r.status_code, json.loads(await r.aread())
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:]).get("choices", []):
                delta = choice.get("delta", {})
                text += delta.get("content") or choice.get("text") or ""
                calls += delta.get("tool_calls") or []
                finish = choice.get("finish_reason") or finish
    if "/completions" in url and "chat" not in url:
        return 200, {"choices": [{"text": text, "finish_reason": finish}]}
    message = {"content": text or None, "tool_calls": [{"function": c["function"]} for c in calls] or None}
    return 200, {"choices": [{"message": message, "finish_reason": finish}]}


async def check_every_case(where: str, base_url: str, stream: bool) -> None:
    """The property test at one hop: every case, SEEDS seeds; every reply valid (or, in JSON
    mode, valid so far and cut by max_tokens); the tallies printed for ``make test-structured``."""
    tallies = await run_cases(base_url, CASES, stream=stream)
    print(report(f"{where} ({'streamed' if stream else 'unary'})", tallies))
    for t in tallies:
        assert not t.failures, (t.case, t.failures)
        assert t.valid + t.cut == t.sent == SEEDS


def report(where: str, tallies: list[Tally]) -> str:
    lines = [f"structured output at {where}: {SEEDS} seeds per case, temperature 1.0, max_tokens {ROOM}"]
    for t in tallies:
        cut = f", {t.cut} cut by max_tokens (valid so far)" if t.cut else ""
        lines.append(f"  {t.case:14s} {t.valid}/{t.sent} valid{cut}")
    return "\n".join(lines)
