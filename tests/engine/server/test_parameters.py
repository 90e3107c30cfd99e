"""The full OpenAI parameter set on the real engine: n, best_of, logprobs, echo, stop options."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from genmesh.engine.openai.prompts import PromptTokenizer
from support.servers import GENMESH_ENGINE_ONLY

pytestmark = GENMESH_ENGINE_ONLY

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MSG = [{"role": "user", "content": "Name three colours."}]


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(url, json=body, timeout=120)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def stream(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return chunks


def test_n_sampled_choices_differ_and_usage_sums(engine_url: str) -> None:
    body = {"messages": MSG, "n": 3, "temperature": 1.0, "seed": 7, "max_tokens": 12, "ignore_eos": True}
    data = post(engine_url + CHAT, body)
    assert [c["index"] for c in data["choices"]] == [0, 1, 2]
    texts = [c["message"]["content"] for c in data["choices"]]
    assert len(set(texts)) == 3, texts
    assert data["usage"]["completion_tokens"] == 36
    assert data["usage"]["prompt_tokens"] == post(engine_url + CHAT, {**body, "n": 1})["usage"]["prompt_tokens"]


def test_n_streamed_interleaves_all_choices(engine_url: str) -> None:
    body = {
        "prompt": "Once upon a time",
        "n": 2,
        "seed": 3,
        "temperature": 1.0,
        "max_tokens": 10,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    chunks = stream(engine_url + COMP, body)
    texts = ["", ""]
    finished = set()
    for c in chunks:
        for choice in c["choices"]:
            texts[choice["index"]] += choice["text"]
            if choice["finish_reason"] is not None:
                finished.add(choice["index"])
    assert finished == {0, 1}
    assert chunks[-1]["usage"]["completion_tokens"] == 20
    assert all(texts), texts
    # (no equality with the unary reply: batch composition changes the numerics, and so samples)


def test_best_of_beam_search_returns_n_best(engine_url: str) -> None:
    # ignore_eos: every beam runs to max_tokens, so no beam can end early whatever the model prefers
    body = {"prompt": "The capital of France is", "best_of": 4, "n": 2, "max_tokens": 8, "ignore_eos": True}
    data = post(engine_url + COMP, body)
    assert len(data["choices"]) == 2
    assert [c["finish_reason"] for c in data["choices"]] == ["length", "length"]
    assert all(c["text"] for c in data["choices"])
    assert data["choices"][0]["text"] != data["choices"][1]["text"]  # two different beams
    assert data["usage"]["completion_tokens"] == 16


def test_chat_logprobs_unary_and_stream_agree(engine_url: str) -> None:
    body = {"messages": MSG, "logprobs": True, "max_tokens": 10, "ignore_eos": True, "temperature": 0}
    data = post(engine_url + CHAT, body)
    entries = data["choices"][0]["logprobs"]["content"]
    assert len(entries) == data["usage"]["completion_tokens"] == 10
    assert all(e["logprob"] <= 0.0 and e["top_logprobs"] == [] for e in entries)
    assert b"".join(bytes(e["bytes"]) for e in entries).decode() == data["choices"][0]["message"]["content"]
    streamed = [
        e
        for c in stream(engine_url + CHAT, body)
        for ch in c["choices"]
        if ch["logprobs"]
        for e in ch["logprobs"]["content"]
    ]
    assert [e["token"] for e in streamed] == [e["token"] for e in entries]
    assert [e["logprob"] for e in streamed] == pytest.approx([e["logprob"] for e in entries], abs=1e-3)


def test_completion_logprobs_shape(engine_url: str) -> None:
    body = {"prompt": "1, 2, 3,", "logprobs": 1, "max_tokens": 6, "ignore_eos": True, "temperature": 0}
    lp = post(engine_url + COMP, body)["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == 6
    assert lp["text_offset"] == sorted(lp["text_offset"])
    assert lp["text_offset"][0] == 0
    for tok, val, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
        # the most likely token, and the chosen one always (the same one, mostly, when greedy)
        assert top[tok] == val
        assert 1 <= len(top) <= 2
        assert max(top.values()) >= val


def test_echo_prepends_the_prompt(engine_url: str) -> None:
    body = {"prompt": "Roses are red,", "echo": True, "max_tokens": 5, "temperature": 0}
    unary = post(engine_url + COMP, body)["choices"][0]["text"]
    plain = post(engine_url + COMP, {**body, "echo": False})["choices"][0]["text"]
    assert unary == "Roses are red," + plain
    chunks = stream(engine_url + COMP, body)
    assert chunks[0]["choices"][0]["text"] == "Roses are red,"
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == unary


def token_ids(tok: PromptTokenizer, entries: list[dict[str, Any]]) -> list[int]:
    assert tok.table is not None
    index = {piece: i for i, piece in enumerate(tok.table.pieces)}
    return [index[bytes(e["bytes"])] for e in entries]


def test_stop_token_ids_end_generation(engine_url: str, engine_tokenizer: PromptTokenizer) -> None:
    # (ignore_eos also ignores stop token ids, as in OpenVINO GenAI and vLLM, so neither run sets it)
    body = {"prompt": "Count: one, two, three, four,", "max_tokens": 12, "temperature": 0}
    first = post(engine_url + COMP, {**body, "logprobs": 0})["choices"][0]
    tokens = first["logprobs"]["tokens"]
    if first["finish_reason"] == "stop":
        tokens = tokens[:-1]  # the end-of-text token the model chose on this machine
    assert tokens, first
    ids = token_ids(engine_tokenizer, [{"bytes": list(t.encode())} for t in tokens])
    stop_at = ids[min(4, len(ids) - 1)]
    cut = ids.index(stop_at)
    data = post(engine_url + COMP, {**body, "stop_token_ids": [stop_at]})
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"]["completion_tokens"] == cut + 1


def test_include_stop_str_in_output(engine_url: str) -> None:
    body = {"prompt": "Count: one, two, three, four,", "max_tokens": 16, "temperature": 0, "ignore_eos": True}
    text = post(engine_url + COMP, body)["choices"][0]["text"]
    # stop strings from the model's own words, each cut mid-token (their first three characters), so that they are
    # met in the detokenised text rather than as tokens. Two runs of one greedy request can differ where the model
    # has an exact tie: with bf16 logits (AMX, Sapphire Rapids) ' five' and ' six' tie after this prompt, and the
    # run-to-run rounding picks either; so the first four words give four stops (OpenAI's most), and each response
    # is checked on its own
    stops = list(dict.fromkeys(word[:3] for word in text.replace(",", " ").split() if len(word) >= 3))[:4]
    assert stops, text
    cut = post(engine_url + COMP, {**body, "stop": stops})["choices"][0]
    kept = post(engine_url + COMP, {**body, "stop": stops, "include_stop_str_in_output": True})["choices"][0]
    assert cut["finish_reason"] == kept["finish_reason"] == "stop", (cut, kept)
    assert not any(stop in cut["text"] for stop in stops), (stops, cut)
    met = [stop for stop in stops if kept["text"].endswith(stop)]
    assert met, (stops, kept)  # the stop string is kept, and the text ends with it
    assert not any(stop in kept["text"][: -len(met[0])] for stop in stops), (stops, kept)


def test_skip_special_tokens_false_keeps_them(engine_url: str) -> None:
    body = {
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 96,  # room for the greeting to end (with <|im_end|>) whatever its greedy words
        "ignore_eos": True,
        "temperature": 0,
    }
    default = post(engine_url + CHAT, body)["choices"][0]["message"]["content"]
    kept = post(engine_url + CHAT, {**body, "skip_special_tokens": False})["choices"][0]["message"]["content"]
    assert "<|im_end|>" in kept
    assert "<|im_end|>" not in default


def test_penalties_min_p_min_tokens_change_or_bound_output(engine_url: str) -> None:
    base = {"prompt": "la la la la la la", "max_tokens": 16, "temperature": 0, "ignore_eos": True}
    plain = post(engine_url + COMP, base)["choices"][0]["text"]
    penalised = post(engine_url + COMP, {**base, "repetition_penalty": 2.0, "frequency_penalty": 1.5})
    assert penalised["choices"][0]["text"] != plain
    sampled = post(engine_url + COMP, {**base, "temperature": 1.0, "min_p": 0.2, "presence_penalty": 0.5, "seed": 1})
    assert sampled["usage"]["completion_tokens"] == 16
    short = {"prompt": "Hi", "max_tokens": 30, "min_tokens": 20, "temperature": 0}
    assert post(engine_url + COMP, short)["usage"]["completion_tokens"] >= 20


def test_user_and_chat_template_kwargs_are_accepted(engine_url: str) -> None:
    body = {"messages": MSG, "max_tokens": 3, "user": "alice", "chat_template_kwargs": {"enable_thinking": False}}
    assert post(engine_url + CHAT, body)["usage"]["completion_tokens"] >= 1


def test_max_completion_tokens_wins_over_max_tokens(engine_url: str) -> None:
    body = {"messages": MSG, "max_tokens": 9, "max_completion_tokens": 4, "ignore_eos": True}
    assert post(engine_url + CHAT, body)["usage"]["completion_tokens"] == 4


def test_user_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    from genmesh.engine.openai.intake import log_user

    with caplog.at_level("INFO", logger="genmesh.engine.http"):
        log_user("alice", "chat", "m")
        log_user(None, "chat", "m")
    assert [r.user for r in caplog.records] == ["alice"]  # type: ignore[attr-defined]
