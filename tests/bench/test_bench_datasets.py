"""Dataset sampling: random lengths in model tokens, mixed chat lengths, shared prefixes, ShareGPT parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genmesh.bench.datasets import (
    DATASETS,
    TokenCodec,
    mixed_chat_requests,
    parse_sharegpt,
    random_requests,
    shared_prefix_requests,
    sharegpt_requests,
)
from support.bench_fakes import CharCodec
from support.servers import DEFAULT_MODEL


def test_random_prompts_have_the_asked_token_lengths() -> None:
    reqs = random_requests(CharCodec(), 20, input_len=50, output_len=8)
    assert len(reqs) == 20
    assert all(r.prompt_len == 50 and len(CharCodec().encode(r.prompt)) == 50 for r in reqs)
    assert all(r.output_len == 8 for r in reqs)
    assert len({r.prompt for r in reqs}) == 20


def test_random_range_ratio_bounds_and_determinism() -> None:
    a = random_requests(CharCodec(), 200, input_len=100, output_len=40, range_ratio=0.5, seed=3)
    assert all(50 <= r.prompt_len <= 150 and 20 <= r.output_len <= 60 for r in a)
    assert len({r.prompt_len for r in a}) > 20
    assert a == random_requests(CharCodec(), 200, input_len=100, output_len=40, range_ratio=0.5, seed=3)
    with pytest.raises(ValueError, match="range_ratio"):
        random_requests(CharCodec(), 1, 10, 10, range_ratio=1.0)


def test_shared_prefix_requests_share_one_system_prompt() -> None:
    reqs = shared_prefix_requests(CharCodec(), 10, prefix_len=300, output_len=16)
    assert len({r.system for r in reqs}) == 1
    assert reqs[0].system is not None
    assert len(reqs[0].system) == 300
    assert len({r.prompt for r in reqs}) == 10  # "Question i: ..." differ
    assert all(r.prompt_len == 300 + len(r.prompt) for r in reqs)


SHAREGPT = [
    {
        "id": "a",
        "conversations": [{"from": "human", "value": "Tell me a story"}, {"from": "gpt", "value": "Once upon"}],
    },
    {"id": "b", "conversations": [{"from": "gpt", "value": "model first"}, {"from": "human", "value": "x"}]},
    {"id": "c", "conversations": [{"from": "human", "value": "only one turn"}]},
    {"id": "d", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "too short prompt"}]},
    {"id": "e", "conversations": [{"from": "human", "value": "What is 2+2?"}, {"from": "gpt", "value": "four!"}]},
    "not a dict",
]


def test_parse_sharegpt_takes_the_first_human_turn_and_reply() -> None:
    assert parse_sharegpt(SHAREGPT) == [
        ("Tell me a story", "Once upon"),
        ("Hi", "too short prompt"),
        ("What is 2+2?", "four!"),
    ]
    with pytest.raises(ValueError, match="JSON list"):
        parse_sharegpt({"conversations": []})


def test_sharegpt_requests_filter_and_sample(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(SHAREGPT))
    reqs = sharegpt_requests(CharCodec(), path, 2)
    assert sorted(r.prompt for r in reqs) == ["Tell me a story", "What is 2+2?"]  # "Hi" is under 4 tokens
    assert {r.prompt: r.output_len for r in reqs} == {"Tell me a story": 9, "What is 2+2?": 5}
    fixed = sharegpt_requests(CharCodec(), path, 2, output_len=32)
    assert all(r.output_len == 32 for r in fixed)
    with pytest.raises(ValueError, match="only 2 usable"):
        sharegpt_requests(CharCodec(), path, 3)


def test_mixed_chat_lengths_vary_like_chat_traffic_in_the_models_tokens() -> None:
    codec = TokenCodec(Path(DEFAULT_MODEL))
    reqs = mixed_chat_requests(codec, 64, seed=1)
    ins, outs = sorted(r.prompt_len for r in reqs), sorted(r.output_len for r in reqs)
    assert all(8 <= n <= 1024 for n in ins)
    assert all(8 <= n <= 256 for n in outs)
    assert all(r.prompt_len == len(codec.encode(r.prompt)) for r in reqs)  # counted as the engine counts
    assert 64 <= ins[32] <= 256  # the median near the asked 128 ...
    assert ins[-1] >= 3 * ins[32]  # ... with a long tail ...
    assert ins[0] <= ins[32] // 2  # ... and short prompts too
    assert len(set(ins)) > 30
    assert len(set(outs)) > 20
    assert all(r.prompt.isascii() and r.system is None for r in reqs)  # plain English, one user message
    assert reqs == mixed_chat_requests(codec, 64, seed=1)
    assert reqs != mixed_chat_requests(codec, 64, seed=2)
    with pytest.raises(ValueError, match="at least 8"):
        mixed_chat_requests(codec, 1, median_input=4)


@pytest.mark.parametrize("kind", ["code", "chat"])
def test_prompt_kinds_are_distinct_seeded_and_sized_in_tokens(kind: str) -> None:
    """``--dataset-name code`` / ``chat`` (the draft model's speed-up per prompt kind, docs/qwen.md)."""
    reqs = DATASETS[kind](CharCodec(), 12, 999, 32, seed=1)
    assert len(reqs) == 12
    assert len({r.prompt for r in reqs}) == 12  # no repeat within the set's size
    assert all(r.output_len == 32 and r.prompt_len == len(r.prompt) for r in reqs)  # their own length
    assert reqs == DATASETS[kind](CharCodec(), 12, 999, 32, seed=1)
    assert reqs != DATASETS[kind](CharCodec(), 12, 999, 32, seed=2)
    if kind == "code":
        assert all(r.prompt.startswith("Write ") and "code only" in r.prompt for r in reqs)
