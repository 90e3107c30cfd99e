"""Speculative decoding on the real pair: Qwen2.5-Coder 1.5B with its 0.5B sibling as the draft
(``--draft-model``, the same tokenizer). Greedy replies equal the 1.5B's alone, one request at a time,
and the drafting counters show accepted draft tokens."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from support.qwen import QWEN_05B, start_qwen
from support.servers import metric_value

PROMPTS = [
    "Write a Python function is_prime(n).",
    "Explain in two sentences what a hash map is.",
    "Write a SQL query that counts the rows of a table named users.",
]


def _replies(url: str) -> list[tuple[str, dict[str, int]]]:
    out = []
    for prompt in PROMPTS:  # one request at a time: greedy text is not batch-invariant
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 64, "temperature": 0}
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=900)
        assert r.status_code == 200, r.text
        out.append((r.json()["choices"][0]["message"]["content"], r.json()["usage"]))
    return out


def test_greedy_replies_with_the_0_5b_draft_equal_the_1_5b_alone(tmp_path_factory: pytest.TempPathFactory) -> None:
    # One 1.5B at a time (memory): the plain engine's replies first, then the drafting engine's.
    plain_server = start_qwen(tmp_path_factory.mktemp("qwen-plain"))
    try:
        plain = _replies(plain_server.url)
    finally:
        plain_server.stop()
    draft_server = start_qwen(Path(tmp_path_factory.mktemp("qwen-draft")), "--draft-model", str(QWEN_05B))
    try:
        drafted = _replies(draft_server.url)
        accepted = metric_value(draft_server.url, "genmesh_engine_spec_decode_accepted_tokens_total")
        steps = metric_value(draft_server.url, "genmesh_engine_spec_decode_steps_total")
    finally:
        draft_server.stop()
    assert drafted == plain
    assert accepted > 0
    print(f"accepted draft tokens per step: {accepted / steps:.2f} ({accepted:.0f} over {steps:.0f} request-steps)")
