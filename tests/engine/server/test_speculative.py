"""Speculative decoding with a draft model (``--draft-model``) on the real engine: SmolLM2-135M as its
own draft (the same tokenizer, and a draft the model always agrees with). Greedy replies equal the
default engine's token for token, one request at a time (greedy text is not batch-invariant across
batch compositions, so only single requests are compared), and the drafting counters in /metrics
move: every draft token is accepted, so a step gives more than one token. The Qwen2.5-Coder pair
(1.5B with its 0.5B draft) runs in ``make test-qwen`` (tests/qwen)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.polling import wait_until
from support.servers import DEFAULT_MODEL, GENMESH_ENGINE_ONLY, Server, metric_value, start_engine

pytestmark = [GENMESH_ENGINE_ONLY, pytest.mark.slow]

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "Name three colours of the rainbow.",
    "What is the capital of France? Answer in one sentence.",
]
DRAFT_TOKENS = 4
STEPS = "genmesh_engine_spec_decode_steps_total"
ACCEPTED = "genmesh_engine_spec_decode_accepted_tokens_total"
PROPOSED = "genmesh_engine_spec_decode_draft_tokens_total"


@pytest.fixture(scope="module")
def draft_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    extra = ("--draft-model", str(DEFAULT_MODEL), "--num-assistant-tokens", str(DRAFT_TOKENS))
    server = start_engine(tmp_path_factory.mktemp("draft"), *extra, timeout_s=600)  # two models to load
    yield server
    server.stop()


def _reply(url: str, prompt: str) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 40, "temperature": 0, "logprobs": True}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def _tokens(reply: dict[str, Any]) -> list[str]:
    return [t["token"] for t in reply["choices"][0]["logprobs"]["content"]]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_reply_with_the_draft_is_the_default_engines_token_for_token(
    draft_engine: Server, engine_url: str, prompt: str
) -> None:
    drafted, plain = _reply(draft_engine.url, prompt), _reply(engine_url, prompt)
    assert _tokens(drafted) == _tokens(plain)
    assert drafted["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    assert drafted["usage"] == plain["usage"]


def test_drafting_counters_move(draft_engine: Server) -> None:
    before = {name: metric_value(draft_engine.url, name) for name in (STEPS, ACCEPTED, PROPOSED)}
    body = {"prompt": "one two three", "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    r = httpx.post(draft_engine.url + "/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    wait_until(lambda: metric_value(draft_engine.url, ACCEPTED) > before[ACCEPTED], 30, what="accepted tokens counted")
    steps = metric_value(draft_engine.url, STEPS) - before[STEPS]
    accepted = metric_value(draft_engine.url, ACCEPTED) - before[ACCEPTED]
    proposed = metric_value(draft_engine.url, PROPOSED) - before[PROPOSED]
    assert steps + accepted == 24  # each request-step: the model's own token plus the accepted drafts
    assert steps < 24  # several tokens a step: the model accepts its own drafts
    assert 0 < accepted <= proposed == steps * DRAFT_TOKENS


def test_beam_search_and_ngram_parameters_are_refused_with_a_draft(draft_engine: Server) -> None:
    for extra, param in (({"best_of": 2, "n": 1}, "best_of"), ({"max_ngram_size": 2}, "max_ngram_size")):
        r = httpx.post(
            draft_engine.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 4, **extra}, timeout=60
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == param


def test_sampled_requests_are_refused_with_a_draft_and_greedy_ones_still_served(draft_engine: Server) -> None:
    """OpenVINO GenAI fails steps of sampled speculative decoding (docs/qwen.md): a 400 up front."""
    for extra in ({}, {"temperature": 0.7}):  # OpenAI's default temperature is 1
        r = httpx.post(
            draft_engine.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 4, **extra}, timeout=60
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "temperature"
    greedy = {"prompt": "Hi", "max_tokens": 4, "temperature": 0}
    assert httpx.post(draft_engine.url + "/v1/completions", json=greedy, timeout=120).status_code == 200
