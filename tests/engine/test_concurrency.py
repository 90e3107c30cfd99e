"""Many simultaneous streams: all complete, each correct and independent of the others."""

from __future__ import annotations

import asyncio
import json

import httpx

N = 16


def prompt(i: int) -> list[dict[str, str]]:
    topics = ["rivers", "mountains", "owls", "rain", "trains", "bread", "tea", "stars"]
    return [{"role": "user", "content": f"Tell me one fact about {topics[i % len(topics)]} number {i}."}]


async def stream_text(client: httpx.AsyncClient, url: str, i: int) -> tuple[str, int]:
    body = {
        "messages": prompt(i),
        "max_tokens": 32,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    text, usage = "", -1
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"]:
                text += chunk["choices"][0]["delta"].get("content", "")
            if chunk.get("usage"):
                usage = chunk["usage"]["completion_tokens"]
    return text, usage


async def test_sixteen_simultaneous_streams(engine_url: str) -> None:
    async with httpx.AsyncClient(timeout=300) as client:
        # Reference answers, one at a time.
        expected = []
        for i in range(N):
            r = await client.post(
                engine_url + "/v1/chat/completions", json={"messages": prompt(i), "max_tokens": 32, "temperature": 0}
            )
            expected.append(r.json()["choices"][0]["message"]["content"])
        results = await asyncio.gather(*(stream_text(client, engine_url, i) for i in range(N)))
    assert len(results) == N
    for i, (text, usage) in enumerate(results):
        assert usage > 0
        # Batched and solo greedy runs may drift apart after many tokens (batch-shape numerics),
        # but each stream must start like its own solo answer, never like another prompt's.
        shared = next((k for k, (a, b) in enumerate(zip(text, expected[i], strict=False)) if a != b), len(text))
        assert shared >= min(24, len(expected[i])), f"stream {i}: {text!r} vs solo {expected[i]!r}"
    # distinct prompts give distinct answers: no cross-talk between streams
    assert len({t for t, _ in results}) > N // 2
