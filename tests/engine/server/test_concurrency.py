"""Many simultaneous streams: all complete, each correct and independent of the others.

Batched and solo greedy runs need not be identical: the batch's shape changes the arithmetic (the
log-probabilities moved by up to 0.23 nats on an AMD EPYC), so where the model hesitates between two
tokens a batched stream may take the other one, and from there on it says something else. A stream
may therefore leave its solo answer only at a token that the solo run chose with a probability below
``SURE``; a token chosen with p >= 0.75 beats every other by at least ln 3 = 1.1 nats, which no such
noise overturns. Counting prompts make nearly every token that sure, so the check covers most tokens.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx

N = 16
SURE = 0.75


def body(i: int) -> dict[str, Any]:
    start = 100 * i + 7  # each stream counts in numbers of its own: cross-talk cannot look right
    return {
        "prompt": f"{start}, {start + 1}, {start + 2}, {start + 3},",
        "max_tokens": 24 + i,  # and stops at a length of its own
        "temperature": 0,
        "ignore_eos": True,
        "logprobs": 1,
    }


async def stream_tokens(client: httpx.AsyncClient, url: str, i: int) -> tuple[list[str], int]:
    req = {**body(i), "stream": True, "stream_options": {"include_usage": True}}
    tokens, usage = [], -1
    async with client.stream("POST", url + "/v1/completions", json=req) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk["choices"]:
                tokens += (choice["logprobs"] or {}).get("tokens") or []
            if chunk.get("usage"):
                usage = chunk["usage"]["completion_tokens"]
    return tokens, usage


def checked_prefix(batched: list[str], solo: list[str], solo_logprobs: list[float]) -> int:
    """How many leading tokens agree; fails where they part at a token the solo run was sure of."""
    for k, (a, b) in enumerate(zip(batched, solo, strict=True)):
        if a != b:
            p = math.exp(solo_logprobs[k])
            assert p < SURE, f"token {k}: batched {a!r}, solo {b!r} chosen with p={p:.2f}"
            return k
    return len(solo)


async def test_sixteen_simultaneous_streams(engine_url: str) -> None:
    async with httpx.AsyncClient(timeout=300) as client:
        # Reference answers, one at a time.
        solo = []
        for i in range(N):
            r = await client.post(engine_url + "/v1/completions", json=body(i))
            assert r.status_code == 200, r.text
            solo.append(r.json()["choices"][0]["logprobs"])
            assert len(solo[i]["tokens"]) == 24 + i
        results = await asyncio.gather(*(stream_tokens(client, engine_url, i) for i in range(N)))
    agreed = []
    for i, (tokens, usage) in enumerate(results):
        # every stream got exactly its own number of tokens: none lost, none borrowed from another
        assert usage == len(tokens) == 24 + i, (i, usage, len(tokens))
        agreed.append(checked_prefix(tokens, solo[i]["tokens"], solo[i]["token_logprobs"]))
    # Not vacuous: the streams agree with their solo answers over most of their length.
    assert sum(agreed) >= sum(24 + i for i in range(N)) // 2, agreed
