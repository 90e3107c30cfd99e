"""Prompt-lookup decoding (``--prompt-lookup``, or OVMS's ``plugin_config {"prompt_lookup": true}``) on
the real engine: the same greedy text as the default engine, fewer steps than tokens on a reply
that repeats its prompt (so several tokens arrive per chunk), the request parameters OVMS names,
their limits, and what it cannot do (beam search)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.servers import GENMESH_ENGINE_ONLY, Server, metric_value, start_engine
from support.spec_distribution import ALPHA, chi_square, continuation_distribution, rejects_greedy, sample_continuations
from support.sse import chunks, events

pytestmark = [GENMESH_ENGINE_ONLY, pytest.mark.slow]

# A completion whose continuation is in its prompt: what prompt lookup is for (and robust on every
# CPU: the model continues a counting pattern it has just seen twice).
COUNTING = {"prompt": "one two three four five six seven eight nine ten. " * 2 + "one two three", "max_tokens": 24}
GREEDY = {"temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def lookup_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # OVMS's way of turning it on; --prompt-lookup is the same switch (tests/engine/unit/test_config.py).
    server = start_engine(tmp_path_factory.mktemp("lookup"), "--plugin-config", json.dumps({"prompt_lookup": True}))
    yield server
    server.stop()


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json=body, timeout=120)


def test_greedy_text_is_the_default_engines(lookup_engine: Server, engine_url: str) -> None:
    body = COUNTING | GREEDY
    looked, plain = _post(lookup_engine.url, body), _post(engine_url, body)
    assert looked.status_code == plain.status_code == 200, (looked.text, plain.text)
    assert looked.json()["usage"] == plain.json()["usage"]
    assert looked.json()["choices"][0]["text"] == plain.json()["choices"][0]["text"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_string_inside_a_draft_ends_the_text_where_the_default_engine_does(
    lookup_engine: Server, engine_url: str, stream: bool
) -> None:
    # "seven" comes in the middle of the tokens a step accepts from the prompt: the text, the reason
    # and the usage must still be the default engine's.
    body = COUNTING | {"temperature": 0, "stop": ["seven"], "stream": stream, "stream_options": {"include_usage": True}}
    body = body if stream else {k: v for k, v in body.items() if k != "stream_options"}

    def answer(url: str) -> tuple[str, str | None, dict[str, int]]:
        if not stream:
            r = _post(url, body)
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            return choice["text"], choice["finish_reason"], r.json()["usage"]
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
            assert r.status_code == 200
            got = chunks(events(r))
        text = "".join(c["choices"][0]["text"] for c in got if c["choices"])
        reasons = [c["choices"][0]["finish_reason"] for c in got if c["choices"] and c["choices"][0]["finish_reason"]]
        return text, reasons[-1] if reasons else None, got[-1]["usage"]

    looked, plain = answer(lookup_engine.url), answer(engine_url)
    assert looked == plain
    assert looked[1] == "stop"
    assert "seven" not in looked[0]


def test_a_reply_found_in_the_prompt_comes_several_tokens_a_step(lookup_engine: Server) -> None:
    body = COUNTING | GREEDY | {"stream": True, "stream_options": {"include_usage": True}, "logprobs": 1}
    with httpx.stream("POST", lookup_engine.url + "/v1/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        got = chunks(events(r))
    texts = [c["choices"][0] for c in got if c["choices"] and c["choices"][0]["text"]]
    tokens = got[-1]["usage"]["completion_tokens"]
    assert tokens == 24
    # One chunk per engine step: drafts accepted from the prompt mean fewer steps than tokens.
    assert len(texts) < tokens, f"{len(texts)} chunks for {tokens} tokens: no draft was accepted"
    assert sum(len(c["logprobs"]["tokens"]) for c in texts) == tokens  # a log-probability for every token


def test_request_parameters_sampling_and_n(lookup_engine: Server) -> None:
    body = COUNTING | {"num_assistant_tokens": 3, "max_ngram_size": 2, "temperature": 0.8, "seed": 7, "n": 2}
    r = _post(lookup_engine.url, body)
    assert r.status_code == 200, r.text
    assert [c["index"] for c in r.json()["choices"]] == [0, 1]


# Random digits the model may continue from the prompt (what prompt lookup proposes) or not.
SAMPLED_PROMPT = "Random digits: 3 7 1 9 4 2 8 5 6 0 3 7 1 9"
ACCEPTED = "genmesh_engine_spec_decode_accepted_tokens_total"


def test_sampled_continuations_keep_the_models_distribution(lookup_engine: Server, engine_url: str) -> None:
    """OpenVINO GenAI keeps a token proposed from the prompt only when it is the token the model sampled
    itself, so prompt lookup samples from the model's own distribution: 400 continuations of 3 tokens
    pass the chi-square test against the model's probabilities (tests/support/spec_distribution.py),
    with proposals kept. A draft model goes through another acceptance test, which fails this one
    (test_speculative.py), so a drafting engine refuses sampled requests; prompt lookup serves them."""
    reference = continuation_distribution(engine_url, SAMPLED_PROMPT, 3, 400)
    before = metric_value(lookup_engine.url, ACCEPTED)
    verdict = chi_square(sample_continuations(lookup_engine.url, SAMPLED_PROMPT, 3, 400), reference)
    print(verdict)
    assert verdict.p_value > ALPHA, str(verdict)
    assert metric_value(lookup_engine.url, ACCEPTED) > before  # tokens proposed from the prompt were kept
    greedy = rejects_greedy(reference, 400)
    assert greedy.p_value < ALPHA, str(greedy)  # the prompt's continuations are spread out enough to tell


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"num_assistant_tokens": 17}, "num_assistant_tokens"),  # above --prompt-lookup-limit (16)
        ({"max_ngram_size": 100}, "max_ngram_size"),
        ({"best_of": 2}, "best_of"),  # beam search cannot draft
        ({"num_assistant_tokens": 0}, "num_assistant_tokens"),
        ({"assistant_confidence_threshold": 0.4}, "assistant_confidence_threshold"),  # needs a draft model
    ],
)
def test_what_it_refuses(lookup_engine: Server, extra: dict[str, Any], param: str) -> None:
    r = _post(lookup_engine.url, COUNTING | extra)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert _post(lookup_engine.url, COUNTING | {"max_tokens": 2}).status_code == 200


def test_an_engine_without_it_refuses_its_parameters(engine_url: str) -> None:
    for name in ("num_assistant_tokens", "max_ngram_size"):
        r = _post(engine_url, COUNTING | {name: 3})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == name
        assert "--prompt-lookup" in r.json()["error"]["message"]


def test_its_parameters_are_checked_before_the_prompt_is_tokenised(engine_url: str) -> None:
    # A prompt past the context would be refused while tokenising; the parameter check comes first, as
    # the other parameter checks do, so a bad request costs no tokenising and no grammar compile.
    r = _post(engine_url, {"prompt": "word " * 9000, "max_tokens": 4, "num_assistant_tokens": 3})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "num_assistant_tokens"
