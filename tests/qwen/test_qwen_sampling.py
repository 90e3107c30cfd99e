"""Sampled speculative decoding on the real pair, Qwen2.5-Coder 1.5B with its 0.5B draft: why a
drafting engine answers sampled requests with a 400 (tests/engine/server/test_speculative.py does
the same with SmolLM2 as its own draft; docs/qwen.md).

The 1.5B alone (the engine) samples 3-token continuations at the odds its scorer gives (the control);
OpenVINO GenAI's pipeline with the 0.5B draft (scripts/spec_sampling_probe.py, the engine's IR
folders) does not: a tripwire that fails when an upgrade fixes it, the day to lift the 400."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from support.qwen import QWEN_05B, QWEN_15B, start_qwen
from support.spec_distribution import (
    ALPHA,
    Verdict,
    chi_square,
    continuation_distribution,
    rejects_greedy,
    sample_continuations,
    sample_drafted,
)

# Digits after a space; the 1.5B spreads them out (the 0.5B proposes its own favourites).
PROMPT = "Here is a random number between 1 and 100:"
LENGTH, SAMPLES = 3, 400


@dataclass
class Sampled:
    engine: Verdict
    greedy: Verdict
    drafted: Verdict


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory) -> Sampled:
    # The scorer (a second compiled 1.5B) gives the reference; one 1.5B process at a time (memory).
    server = start_qwen(Path(tmp_path_factory.mktemp("qwen-sampled")), "--max-num-scoring-seqs", "2")
    try:
        reference = continuation_distribution(server.url, PROMPT, LENGTH, SAMPLES)
        engine = chi_square(sample_continuations(server.url, PROMPT, LENGTH, SAMPLES), reference)
    finally:
        server.stop()
    drafted = chi_square(sample_drafted(QWEN_15B, QWEN_05B, PROMPT, LENGTH, SAMPLES, timeout_s=3000), reference)
    seen = Sampled(engine, rejects_greedy(reference, SAMPLES), drafted)
    print(f"\nengine alone: {seen.engine}\nwith the 0.5B draft (OpenVINO GenAI): {seen.drafted}")
    return seen


def test_the_1_5bs_sampled_continuations_keep_its_distribution(sampled: Sampled) -> None:
    assert sampled.engine.p_value > ALPHA, str(sampled.engine)
    assert sampled.greedy.p_value < ALPHA, str(sampled.greedy)  # the prompt's continuations are spread out


def test_openvino_genai_sampled_drafting_with_the_0_5b_departs_from_the_1_5bs_distribution(sampled: Sampled) -> None:
    """When this fails, OpenVINO GenAI keeps the distribution: lift the 400 in
    ``sampling_params.check_prompt_lookup`` and test the drafting engine here instead."""
    assert sampled.drafted.p_value < ALPHA, f"OpenVINO GenAI's sampled drafting now keeps it: {sampled.drafted}"
