"""Prompt log-probabilities and true top-k on the real engine (the scorer: the same model's logits)."""

from __future__ import annotations

import statistics
from typing import Any

import httpx
from test_parameters import post, stream

from support.leaders import assert_leads
from support.servers import GENMESH_ENGINE_ONLY

pytestmark = GENMESH_ENGINE_ONLY

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
PARIS = "The capital of France is"


def tokenize(url: str, body: dict[str, Any]) -> list[int]:
    r = httpx.post(url + "/tokenize", json=body, timeout=30)
    assert r.status_code == 200, r.text
    tokens: list[int] = r.json()["tokens"]
    return tokens


def test_echo_with_max_tokens_0_scores_the_prompt_as_given(engine_url: str) -> None:
    # Token ids that the tokenizer would never produce for this text (one character per token) are
    # scored exactly as given: one position per id.
    ids = tokenize(engine_url, {"prompt": "Paris", "add_special_tokens": False})
    spelled = [t for ch in "Paris" for t in tokenize(engine_url, {"prompt": ch, "add_special_tokens": False})]
    assert len(spelled) > len(ids)
    for prompt in (ids, spelled):
        data = post(engine_url + COMP, {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 3})
        choice = data["choices"][0]
        assert choice["text"] == "Paris"
        assert choice["finish_reason"] == "length"
        assert data["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 0, "total_tokens": len(prompt)}
        lp = choice["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(prompt)
        assert lp["token_logprobs"][0] is None
        assert lp["top_logprobs"][0] is None
        for tok, val, top in zip(lp["tokens"][1:], lp["token_logprobs"][1:], lp["top_logprobs"][1:], strict=True):
            assert val <= 0.0
            assert top[tok] == val  # the prompt's own token is always there
            assert 3 <= len(top) <= 4
            assert max(top.values()) >= val
    # the spelled-out prompt is less likely than the tokenizer's own encoding of the same text
    assert sum(lp["token_logprobs"][1:]) < 0.0


def test_top_logprobs_hold_the_most_likely_token_at_high_temperature(engine_url: str) -> None:
    greedy = post(engine_url + COMP, {"prompt": PARIS, "max_tokens": 1, "temperature": 0, "logprobs": 1})
    best = greedy["choices"][0]["logprobs"]["tokens"][0]
    best_lp = greedy["choices"][0]["logprobs"]["token_logprobs"][0]
    hot = {"prompt": PARIS, "max_tokens": 6, "temperature": 2.0, "seed": 7, "logprobs": 5}
    for lp in (
        post(engine_url + COMP, hot)["choices"][0]["logprobs"],
        _streamed_completion_logprobs(engine_url, hot),
    ):
        first = lp["top_logprobs"][0]
        # the greedy token leads the first position's list, whatever was sampled
        assert max(first, key=first.get) == best
        assert abs(first[best] - best_lp) < 1e-3
        for tok, val, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
            assert top[tok] == val
            assert 5 <= len(top) <= 6
            ranked = sorted(top.values(), reverse=True)
            assert val in ranked
            assert ranked[0] >= val


def _streamed_completion_logprobs(url: str, body: dict[str, Any]) -> dict[str, list[Any]]:
    merged: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": []}
    for chunk in stream(url + COMP, body):
        for ch in chunk["choices"]:
            if ch["logprobs"]:
                for key, values in merged.items():
                    values.extend(ch["logprobs"][key])
    return merged


def test_chat_top_logprobs_unary_and_streamed(engine_url: str) -> None:
    msg = [{"role": "user", "content": "What is the capital of France?"}]
    greedy = {"messages": msg, "max_tokens": 1, "temperature": 0, "logprobs": True}
    post(engine_url + CHAT, greedy)  # the prompt in the prefix cache, as the requests below see it
    best = post(engine_url + CHAT, greedy)["choices"][0]["logprobs"]["content"][0]["token"]
    body = {"messages": msg, "max_tokens": 5, "temperature": 2.0, "seed": 3, "logprobs": True, "top_logprobs": 4}
    unary = post(engine_url + CHAT, body)["choices"][0]["logprobs"]["content"]
    streamed = [
        e
        for c in stream(engine_url + CHAT, body)
        for ch in c["choices"]
        if ch["logprobs"]
        for e in ch["logprobs"]["content"]
    ]
    for entries in (unary, streamed):
        assert_leads(entries[0]["top_logprobs"], best)  # (within bf16's noise: support/leaders.py)
        for e in entries:
            tops = e["top_logprobs"]
            assert len(tops) == 4
            values = [t["logprob"] for t in tops]
            assert values == sorted(values, reverse=True)
            assert e["logprob"] <= values[0]
            assert all(t["bytes"] is not None for t in tops)


def test_vllm_prompt_logprobs(engine_url: str) -> None:
    ids = tokenize(engine_url, {"prompt": PARIS, "add_special_tokens": False})
    data = post(engine_url + COMP, {"prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 2})
    plp = data["choices"][0]["prompt_logprobs"]
    assert len(plp) == len(ids)
    assert plp[0] is None
    for token_id, entry in zip(ids[1:], plp[1:], strict=True):
        own = entry[str(token_id)]
        assert own["logprob"] <= 0.0
        assert own["rank"] >= 1
        assert {1, 2} <= {e["rank"] for e in entry.values()}  # the two most likely, and the prompt's own
        assert 2 <= len(entry) <= 3
    chat = post(
        engine_url + CHAT,
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "prompt_logprobs": 0},
    )
    prompt_tokens = chat["usage"]["prompt_tokens"]
    assert len(chat["prompt_logprobs"]) == prompt_tokens
    assert all(len(e) == 1 for e in chat["prompt_logprobs"][1:])


def test_the_scorer_agrees_with_the_pipeline_on_generated_tokens(engine_url: str) -> None:
    """The pipeline's own logprob of each generated token and the scorer's, on the same tokens:
    one model, bf16 arithmetic in different kernels (judged on the distribution)."""
    deltas: list[float] = []
    agree = total = 0
    for question in ("Name three colours.", "What is 12 times 7?", "Who wrote Hamlet?", "Describe the sea."):
        prompt = tokenize(
            engine_url, {"messages": [{"role": "user", "content": question}], "add_generation_prompt": True}
        )
        gen = post(engine_url + COMP, {"prompt": prompt, "max_tokens": 20, "temperature": 0, "logprobs": 0})
        lp = gen["choices"][0]["logprobs"]
        ids = [tokenize(engine_url, {"prompt": t, "add_special_tokens": False}) for t in lp["tokens"]]
        if any(len(i) != 1 for i in ids):
            continue  # a token whose text does not round-trip: skip this answer
        generated = [i[0] for i in ids]
        scored = post(engine_url + COMP, {"prompt": prompt + generated, "max_tokens": 0, "echo": True, "logprobs": 1})[
            "choices"
        ][0]["logprobs"]
        for j, pipeline_lp in enumerate(lp["token_logprobs"]):
            pos = len(prompt) + j
            deltas.append(abs(pipeline_lp - scored["token_logprobs"][pos]))
            top = scored["top_logprobs"][pos]
            agree += int(max(top, key=top.get) == scored["tokens"][pos])
            total += 1
    assert total >= 40
    deltas.sort()
    assert statistics.median(deltas) < 0.05, deltas
    assert deltas[int(0.95 * len(deltas))] < 0.3, deltas
    assert agree / total >= 0.9  # greedy tokens are the scorer's argmax too


def test_echo_with_generation_and_logprobs_streams_the_prompt_first(engine_url: str) -> None:
    ids = tokenize(engine_url, {"prompt": PARIS, "add_special_tokens": False})
    chunks = stream(
        engine_url + COMP, {"prompt": PARIS, "max_tokens": 3, "echo": True, "logprobs": 1, "temperature": 0}
    )
    first = chunks[0]["choices"][0]
    assert first["text"] == PARIS
    assert first["logprobs"]["token_logprobs"][0] is None
    assert len(first["logprobs"]["tokens"]) == len(ids)
    unary = post(engine_url + COMP, {"prompt": PARIS, "max_tokens": 3, "echo": True, "logprobs": 1, "temperature": 0})
    lp = unary["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(ids) + 3
    assert lp["text_offset"] == sorted(lp["text_offset"])
    assert unary["choices"][0]["text"].startswith(PARIS)
