"""Added TTFT of ``/v1/responses`` over ``/v1/chat/completions``: the same prompt, streamed, one
request at a time, the two endpoints interleaved; prints each base URL's median TTFTs and ratio.

    .venv/bin/python scripts/responses_ttft.py http://127.0.0.1:8008 http://127.0.0.1:8888
"""

from __future__ import annotations

import statistics
import sys
import time

import httpx

PROMPT = "Write a short poem about the sea."
MODEL = "SmolLM2-135M-Instruct"
CHAT, RESPONSES = "/v1/chat/completions", "/v1/responses"
ROUNDS = 40


def ttft(client: httpx.Client, url: str, path: str) -> float:
    """Seconds from sending the request to the first event carrying generated text."""
    if path == CHAT:
        body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16}
        marker = '"content":"'
    else:
        body = {"input": PROMPT, "max_output_tokens": 16}
        marker = '"type":"response.output_text.delta"'
    body |= {"model": MODEL, "temperature": 0, "stream": True}
    started = time.perf_counter()
    first = None
    with client.stream("POST", url + path, json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if first is None and line.startswith("data: ") and marker in line and '"content":""' not in line:
                first = time.perf_counter() - started
    assert first is not None, f"no text from {url}{path}"
    return first


def main() -> None:
    for url in sys.argv[1:]:
        times: dict[str, list[float]] = {CHAT: [], RESPONSES: []}
        with httpx.Client(timeout=60) as client:
            ttft(client, url, CHAT)  # warm-up
            ttft(client, url, RESPONSES)
            for i in range(ROUNDS):
                for path in (CHAT, RESPONSES) if i % 2 == 0 else (RESPONSES, CHAT):
                    times[path].append(ttft(client, url, path))
        chat, resp = statistics.median(times[CHAT]), statistics.median(times[RESPONSES])
        print(f"{url}: median TTFT chat {chat * 1000:.1f} ms, responses {resp * 1000:.1f} ms, ratio {resp / chat:.3f}")


if __name__ == "__main__":
    main()
