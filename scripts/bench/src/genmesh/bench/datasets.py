"""What the load generator sends: ``random``, ``shared-prefix`` and ShareGPT-format requests.

Lengths are in the model's own tokens (a :class:`TokenCodec`, normally :class:`ModelTokenizer`
over the GGUF or OpenVINO folder being served), as vLLM's ``benchmark_serving`` counts them.
Every sampler is deterministic for a given seed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .workload import TOPICS

# The lowest token ids are special and control tokens in most vocabularies; random prompts avoid them.
FIRST_ORDINARY_TOKEN = 256


@dataclass(frozen=True)
class RequestSpec:
    """One request: ``prompt`` (the user message, or the whole prompt for completions), an optional
    ``system`` message sent before it (chat) or prepended (completions), its length in tokens and
    how many tokens to generate."""

    prompt: str
    prompt_len: int
    output_len: int
    system: str | None = None


class TokenCodec(Protocol):
    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


def random_requests(
    codec: TokenCodec,
    n: int,
    input_len: int,
    output_len: int,
    range_ratio: float = 0.0,
    seed: int = 0,
) -> list[RequestSpec]:
    """``n`` prompts of random tokens, ``input_len`` (± ``range_ratio``) tokens each, re-encoded and
    cut so that the text really is that many tokens; output lengths vary by the same ratio."""
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError("range_ratio must be in [0, 1)")
    if input_len < 1 or output_len < 1:
        raise ValueError("input_len and output_len must be at least 1")
    rng = np.random.default_rng(seed)
    in_lens = rng.integers(int(input_len * (1 - range_ratio)), int(input_len * (1 + range_ratio)) + 1, size=n)
    out_lens = rng.integers(int(output_len * (1 - range_ratio)), int(output_len * (1 + range_ratio)) + 1, size=n)
    low = min(FIRST_ORDINARY_TOKEN, codec.vocab_size // 2)
    out: list[RequestSpec] = []
    for in_len, out_len in zip(in_lens, out_lens, strict=True):
        target = max(1, int(in_len))
        ids = rng.integers(low, codec.vocab_size, size=target).tolist()
        text = codec.decode(ids)
        encoded = codec.encode(text)
        while len(encoded) < target:  # decoding merged some tokens: top up
            encoded += rng.integers(low, codec.vocab_size, size=target - len(encoded)).tolist()
            encoded = codec.encode(codec.decode(encoded))
        text = codec.decode(encoded[:target])
        out.append(RequestSpec(text, len(codec.encode(text)), max(1, int(out_len))))
    return out


def _filler(codec: TokenCodec, n_tokens: int) -> str:
    base = (
        "You are a careful assistant for a library of short stories. Answer in plain prose, keep names "
        "consistent, never invent citations, and prefer short paragraphs. "
    )
    text = base
    while len(codec.encode(text)) < n_tokens:
        text += base
    return codec.decode(codec.encode(text)[:n_tokens])


def shared_prefix_requests(
    codec: TokenCodec, n: int, prefix_len: int, output_len: int, seed: int = 0
) -> list[RequestSpec]:
    """``n`` requests sharing one long system prompt of ``prefix_len`` tokens, each with its own question."""
    if prefix_len < 1 or output_len < 1:
        raise ValueError("prefix_len and output_len must be at least 1")
    system = _filler(codec, prefix_len)
    rng = random.Random(seed)
    out: list[RequestSpec] = []
    for i in range(n):
        question = f"Question {i + 1}: write a short story about {TOPICS[rng.randrange(len(TOPICS))]}."
        out.append(RequestSpec(question, prefix_len + len(codec.encode(question)), output_len, system=system))
    return out


def parse_sharegpt(data: Any) -> list[tuple[str, str]]:
    """(first human turn, first model reply) of every conversation in a ShareGPT-format document."""
    if not isinstance(data, list):
        raise ValueError("a ShareGPT file is a JSON list of conversations")
    pairs: list[tuple[str, str]] = []
    for entry in data:
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, second = turns[0], turns[1]
        if not (isinstance(first, dict) and isinstance(second, dict)):
            continue
        if first.get("from") not in ("human", "user") or not isinstance(first.get("value"), str):
            continue
        if not isinstance(second.get("value"), str):
            continue
        pairs.append((first["value"], second["value"]))
    return pairs


def sharegpt_requests(
    codec: TokenCodec,
    path: Path,
    n: int,
    output_len: int | None = None,
    seed: int = 0,
    max_prompt_len: int = 1024,
    max_total_len: int = 2048,
) -> list[RequestSpec]:
    """``n`` conversations sampled from a ShareGPT JSON file: the first human turn is the prompt; the
    reply's length in tokens is the output length unless ``output_len`` fixes it. Filtered as vLLM
    does: prompts or replies under 4 tokens, prompts over ``max_prompt_len`` or pairs over
    ``max_total_len`` are skipped."""
    pairs = parse_sharegpt(json.loads(path.read_text()))
    random.Random(seed).shuffle(pairs)
    out: list[RequestSpec] = []
    for prompt, reply in pairs:
        if len(out) == n:
            break
        prompt_len = len(codec.encode(prompt))
        reply_len = output_len if output_len is not None else len(codec.encode(reply))
        if prompt_len < 4 or reply_len < 4 or prompt_len > max_prompt_len or prompt_len + reply_len > max_total_len:
            continue
        out.append(RequestSpec(prompt, prompt_len, reply_len))
    if len(out) < n:
        raise ValueError(f"{path} has only {len(out)} usable conversations, {n} were asked for")
    return out
