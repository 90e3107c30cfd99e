"""Speculative decoding with a draft model (``--draft-model``) on the real engine: SmolLM2-135M as its
own draft (the same tokenizer, and a draft the model always agrees with). Greedy replies equal the
default engine's token for token, one request at a time (greedy text is not batch-invariant across
batch compositions, so only single requests are compared), and the drafting counters in /metrics
move: every draft token is accepted, so a step gives more than one token. Sampled requests get a 400
on a drafting engine: OpenVINO GenAI's sampled speculative decoding does not keep the model's
distribution (a chi-square test below, against the plain engine passing the same test). The
Qwen2.5-Coder pair (1.5B with its 0.5B draft) runs in ``make test-qwen`` (tests/qwen)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.polling import wait_until
from support.servers import DEFAULT_MODEL, GENMESH_ENGINE_ONLY, Server, metric_value, start_engine
from support.spec_distribution import (
    ALPHA,
    chi_square,
    continuation_distribution,
    rejects_greedy,
    sample_continuations,
    sample_drafted,
)

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
    """OpenVINO GenAI's sampled speculative decoding changes the distribution (below): a 400 up front."""
    for extra in ({}, {"temperature": 0.7}):  # OpenAI's default temperature is 1
        r = httpx.post(
            draft_engine.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 4, **extra}, timeout=60
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "temperature"
        assert "distribution" in r.json()["error"]["message"]
    greedy = {"prompt": "Hi", "max_tokens": 4, "temperature": 0}
    assert httpx.post(draft_engine.url + "/v1/completions", json=greedy, timeout=120).status_code == 200


SAMPLED_PROMPT = "My favourite number between 1 and 100 is"  # digits after a space: spread-out continuations
LENGTH, SAMPLES = 3, 400  # the second and third tokens come from drafting steps, where there is a draft


@pytest.fixture(scope="module")
def reference(engine_url: str) -> dict[str, float]:
    """The model's own probabilities of 3-token continuations (the plain engine's scorer: full logits)."""
    return continuation_distribution(engine_url, SAMPLED_PROMPT, LENGTH, SAMPLES)


def test_the_engines_sampled_continuations_keep_the_models_distribution(
    engine_url: str, reference: dict[str, float]
) -> None:
    """The control: the engine without a draft passes the test the drafting pipeline fails (below),
    and the test rejects a sampler that ignored the temperature."""
    verdict = chi_square(sample_continuations(engine_url, SAMPLED_PROMPT, LENGTH, SAMPLES), reference)
    print(verdict)
    assert verdict.p_value > ALPHA, str(verdict)
    greedy = rejects_greedy(reference, SAMPLES)
    assert greedy.p_value < ALPHA, str(greedy)


def test_openvino_genai_sampled_drafting_still_departs_from_the_models_distribution(
    reference: dict[str, float], draft_engine: Server
) -> None:
    """Why a drafting engine refuses sampled requests, kept as a tripwire: OpenVINO GenAI's pipeline with
    SmolLM2 as its own draft (so every proposal should stand at the model's odds), driven directly
    (scripts/spec_sampling_probe.py), samples the modal digits too often (p around 1e-9 here). When an
    upgrade of OpenVINO GenAI fixes it, this fails: then lift the 400 in
    ``sampling_params.check_prompt_lookup`` and test the drafting engine against ``reference`` instead."""
    del draft_engine  # started first: it built the IR folder the probe loads
    counts = sample_drafted(
        DEFAULT_MODEL, DEFAULT_MODEL, SAMPLED_PROMPT, LENGTH, SAMPLES, timeout_s=900, draft_tokens=DRAFT_TOKENS
    )
    verdict = chi_square(counts, reference)
    print(verdict)
    assert verdict.p_value < ALPHA, f"OpenVINO GenAI's sampled drafting now keeps the distribution: {verdict}"
