"""Speculative decoding on the real pair: Qwen2.5-Coder 1.5B with its 0.5B sibling as the draft
(``--draft-model``, the same tokenizer). Greedy replies equal the 1.5B's alone, one request at a time;
sampled replies keep the 1.5B's distribution (a permutation test on the digits it continues a random
sequence with); the drafting counters show accepted draft tokens."""

from __future__ import annotations

import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from support.qwen import QWEN_05B, start_qwen
from support.servers import metric_value

PROMPTS = [
    "Write a Python function is_prime(n).",
    "Explain in two sentences what a hash map is.",
    "Write a SQL query that counts the rows of a table named users.",
]
# A prompt whose continuation is a few random digits: each digit after the first is a token the
# draft proposes and the 1.5B accepts or resamples, so a wrong acceptance rule shows in their counts.
DIGITS_PROMPT = "Random digits: 7 1 9 4 0 3 8 2 6 5 1 9 0 7 3 3 8 4 6 2 5 0 9 1 4"
POSITIONS = 4  # digits compared, position by position
SAMPLES = 200  # sampled continuations per engine (some leave the digits: those are left out, on both)
P_FLOOR = 1e-3  # a correct engine fails this test one run in a thousand


@dataclass
class Observed:
    greedy: list[tuple[str, dict[str, int]]]
    digits: list[str]  # each sampled continuation's first POSITIONS digits
    accepted: float = 0.0
    steps: float = 0.0


def _greedy(url: str) -> list[tuple[str, dict[str, int]]]:
    out = []
    for prompt in PROMPTS:  # one request at a time: greedy text is not batch-invariant
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 64, "temperature": 0}
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=900)
        assert r.status_code == 200, r.text
        out.append((r.json()["choices"][0]["message"]["content"], r.json()["usage"]))
    return out


def _sampled_digits(url: str) -> list[str]:
    body = {"prompt": DIGITS_PROMPT, "max_tokens": 2 * POSITIONS, "temperature": 1.0, "top_p": 1.0}

    def one(_: int) -> str:
        r = httpx.post(url + "/v1/completions", json=body, timeout=900)
        assert r.status_code == 200, r.text
        return "".join(re.findall(r"\d", r.json()["choices"][0]["text"]))[:POSITIONS]

    with ThreadPoolExecutor(8) as pool:
        return [d for d in pool.map(one, range(SAMPLES)) if len(d) == POSITIONS]


def _observe(log_dir: Path, *extra: str) -> Observed:
    server = start_qwen(log_dir, *extra)
    try:
        seen = Observed(_greedy(server.url), _sampled_digits(server.url))
        if extra:
            seen.accepted = metric_value(server.url, "genmesh_engine_spec_decode_accepted_tokens_total")
            seen.steps = metric_value(server.url, "genmesh_engine_spec_decode_steps_total")
        return seen
    finally:
        server.stop()


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Observed, Observed]:
    # One 1.5B at a time (memory): the plain engine first, then the drafting engine.
    plain = _observe(tmp_path_factory.mktemp("qwen-plain"))
    drafted = _observe(tmp_path_factory.mktemp("qwen-draft"), "--draft-model", str(QWEN_05B))
    return plain, drafted


def test_greedy_replies_with_the_0_5b_draft_equal_the_1_5b_alone(observed: tuple[Observed, Observed]) -> None:
    plain, drafted = observed
    assert drafted.greedy == plain.greedy
    assert drafted.accepted > 0
    rate = drafted.accepted / drafted.steps
    print(f"accepted draft tokens per step: {rate:.2f} ({drafted.accepted:.0f} over {drafted.steps:.0f} request-steps)")


def _distance(a: np.ndarray, b: np.ndarray) -> float:
    """Total variation between the digit counts of ``a`` and ``b`` ([samples, positions]), summed
    over positions."""
    total = 0.0
    for pos in range(a.shape[1]):
        pa = np.bincount(a[:, pos], minlength=10) / len(a)
        pb = np.bincount(b[:, pos], minlength=10) / len(b)
        total += 0.5 * float(np.abs(pa - pb).sum())
    return total


def permutation_p_value(a: np.ndarray, b: np.ndarray, rounds: int = 4000, seed: int = 0) -> float:
    """How often relabelling the pooled samples at random gives a distance at least the observed one."""
    rng = np.random.default_rng(seed)
    observed = _distance(a, b)
    pooled = np.concatenate([a, b])
    hits = 0
    for _ in range(rounds):
        rng.shuffle(pooled)
        hits += _distance(pooled[: len(a)], pooled[len(a) :]) >= observed
    return (hits + 1) / (rounds + 1)


def _as_array(digits: list[str]) -> np.ndarray:
    return np.array([[int(c) for c in d] for d in digits], dtype=np.int64)


def test_the_permutation_test_tells_different_distributions_apart() -> None:
    rng = np.random.default_rng(1)
    uniform = rng.integers(0, 10, size=(SAMPLES, POSITIONS))
    skewed = np.where(rng.random((SAMPLES, POSITIONS)) < 0.3, 5, rng.integers(0, 10, size=(SAMPLES, POSITIONS)))
    assert permutation_p_value(uniform, skewed) < P_FLOOR
    assert permutation_p_value(uniform, rng.integers(0, 10, size=(SAMPLES, POSITIONS))) > P_FLOOR


def test_sampled_replies_with_the_draft_keep_the_1_5b_distribution(observed: tuple[Observed, Observed]) -> None:
    plain, drafted = observed
    assert min(len(plain.digits), len(drafted.digits)) >= SAMPLES // 2, "the model stopped writing digits"
    a, b = _as_array(plain.digits), _as_array(drafted.digits)
    # Sampling really is random here (else the test could not tell anything apart).
    assert len(Counter(a[:, 1].tolist())) >= 4
    p = permutation_p_value(a, b)
    print(f"digits: plain {Counter(a.ravel().tolist())}, drafted {Counter(b.ravel().tolist())}; p = {p:.3f}")
    assert p > P_FLOOR
