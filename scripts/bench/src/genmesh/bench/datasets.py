"""What the load generator sends: ``random``, ``mixed``, ``shared-prefix`` and ShareGPT-format requests, with
lengths in the served model's own tokens as vLLM's ``benchmark_serving`` counts them (deterministic
for a seed), and the fixed short chat prompts of the engine and hop benchmarks."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

TOPICS = (  # noqa: SIM905 (sixteen short topics, one line each, would fill a screen)
    "a lighthouse keeper;a lost robot;the first snow of winter;a dragon who hates fire;a city under the sea;"
    "a clockmaker's apprentice;a talking cat;a journey to the moon;an old oak tree;a forgotten library;"
    "a desert caravan;a haunted train station;a chess champion;a mountain village;a pirate's map;a garden on Mars"
).split(";")
# The lowest token ids are special and control tokens in most vocabularies; random prompts avoid them.
FIRST_ORDINARY_TOKEN = 256


@dataclass(frozen=True)
class RequestSpec:
    """A user message (or a whole prompt), an optional system message, its tokens and the tokens to generate."""

    prompt: str
    prompt_len: int
    output_len: int
    system: str | None = None


class TokenCodec:
    """The served model's tokens, as the engine loads them; no special tokens added (tests use a stand-in)."""

    def __init__(self, model_path: Path) -> None:
        from genmesh.engine.openai.prompts import PromptTokenizer

        self._tok = PromptTokenizer(model_path)
        if self._tok.vocab_size is None:
            raise ValueError(f"the vocabulary of {model_path} cannot be read")
        self.vocab_size: int = self._tok.vocab_size

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(ids)


def chat_batch(n: int, max_tokens: int) -> list[RequestSpec]:
    """``n`` fixed, distinct short chat prompts of similar length, ``max_tokens`` new tokens each (``ignore_eos``)."""
    story = "Request {}: write a short story about {}."
    return [RequestSpec(story.format(i + 1, TOPICS[i % len(TOPICS)]), 0, max_tokens) for i in range(n)]


def random_requests(
    codec: TokenCodec, n: int, input_len: int, output_len: int, range_ratio: float = 0.0, seed: int = 0
) -> list[RequestSpec]:
    """``n`` prompts of random tokens, ``input_len`` (± ``range_ratio``) long once re-encoded; outputs alike."""
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError("range_ratio must be in [0, 1)")
    if input_len < 1 or output_len < 1:
        raise ValueError("input_len and output_len must be at least 1")
    rng = np.random.default_rng(seed)
    in_lens = rng.integers(int(input_len * (1 - range_ratio)), int(input_len * (1 + range_ratio)) + 1, size=n)
    out_lens = rng.integers(int(output_len * (1 - range_ratio)), int(output_len * (1 + range_ratio)) + 1, size=n)
    low, out = min(FIRST_ORDINARY_TOKEN, codec.vocab_size // 2), list[RequestSpec]()
    for in_len, out_len in zip(in_lens, out_lens, strict=True):
        target = max(1, int(in_len))
        encoded = codec.encode(codec.decode(rng.integers(low, codec.vocab_size, size=target).tolist()))
        while len(encoded) < target:  # decoding merged some tokens: top up
            encoded += rng.integers(low, codec.vocab_size, size=target - len(encoded)).tolist()
            encoded = codec.encode(codec.decode(encoded))
        text = codec.decode(encoded[:target])
        out.append(RequestSpec(text, len(codec.encode(text)), max(1, int(out_len))))
    return out


MIXED_INSTRUCTIONS = (
    "Summarise these notes in a few sentences:",
    "Answer the question at the end of this conversation:",
    "Rewrite this passage for a child:",
    "List the main points of the following text:",
)
MIXED_PHRASES = (  # noqa: SIM905 (one sentence each; the body of a mixed-length prompt is drawn from these)
    "The meeting moved to Thursday because the room was booked.;Sales rose in the north and fell in the south.;"
    "The new library opens at nine and closes at six.;She asked whether the train stops at the old station.;"
    "Our team fixed the login bug and wrote two new tests.;The recipe needs flour, eggs, butter and a little salt.;"
    "Rain is expected in the afternoon, so bring a coat.;The report says the bridge needs repairs next spring.;"
    "He planted tomatoes, beans and a row of sunflowers.;The museum shows maps drawn by sailors long ago.;"
    "Please send the invoice before the end of the month.;The children built a small boat from old wood.;"
    "What time does the last bus leave the city centre?;Why did the committee delay its decision again?"
).split(";")


def mixed_chat_requests(
    codec: TokenCodec, n: int, median_input: int = 128, median_output: int = 64, seed: int = 0
) -> list[RequestSpec]:
    """``n`` chat requests of plain English whose lengths vary as real chat traffic does: log-normal prompt
    lengths (median ``median_input`` tokens, 8 to 1,024) and output lengths (median ``median_output``, 8 to
    256), generated from ``seed`` alone (no file to ship, the same on every machine)."""
    if median_input < 8 or median_output < 8:
        raise ValueError("median_input and median_output must be at least 8")
    rng = np.random.default_rng(seed)
    in_lens = np.clip(rng.lognormal(np.log(median_input), 0.9, size=n), 8, 1024).astype(int)
    out_lens = np.clip(rng.lognormal(np.log(median_output), 0.7, size=n), 8, 256).astype(int)
    out: list[RequestSpec] = []
    for in_len, out_len in zip(in_lens, out_lens, strict=True):
        words = [MIXED_INSTRUCTIONS[int(rng.integers(len(MIXED_INSTRUCTIONS)))]]
        ids = codec.encode(" ".join(words))
        while len(ids) < in_len:
            words += [MIXED_PHRASES[int(i)] for i in rng.integers(len(MIXED_PHRASES), size=8)]
            ids = codec.encode(" ".join(words))
        text = codec.decode(ids[: int(in_len)])
        out.append(RequestSpec(text, len(codec.encode(text)), int(out_len)))
    return out


def tagged(requests: Sequence[RequestSpec], tag: str) -> list[RequestSpec]:
    """``requests`` with ``[tag]`` before each message: the same work, but no prompt a prefix cache has seen
    under another tag (the chat template's own opening is still shared, as it is in real traffic)."""
    return [RequestSpec(f"[{tag}] {r.prompt}", r.prompt_len, r.output_len, r.system) for r in requests]


def shared_prefix_requests(
    codec: TokenCodec, n: int, prefix_len: int, output_len: int, seed: int = 0
) -> list[RequestSpec]:
    """``n`` requests sharing one long system prompt of ``prefix_len`` tokens, each with its own question."""
    if prefix_len < 1 or output_len < 1:
        raise ValueError("prefix_len and output_len must be at least 1")
    base = "You are a careful assistant for a library of short stories. Answer in plain prose, keep names "
    system = base = base + "consistent, never invent citations, and prefer short paragraphs. "
    while len(codec.encode(system)) < prefix_len:
        system += base
    system, rng = codec.decode(codec.encode(system)[:prefix_len]), random.Random(seed)
    questions = [f"Question {i + 1}: write a short story about {TOPICS[rng.randrange(len(TOPICS))]}." for i in range(n)]
    return [RequestSpec(q, prefix_len + len(codec.encode(q)), output_len, system=system) for q in questions]


CODE_TASKS = (  # noqa: SIM905 (what a coding assistant is asked; a draft model guesses much of the answer)
    "a function that checks whether a string is a palindrome;a function that merges two sorted lists;"
    "a class for a stack with push, pop and peek;a function that counts the words in a text file;"
    "a function that returns the n-th Fibonacci number;a function that parses a date in ISO format;"
    "a binary search over a sorted list;a function that removes duplicates from a list, keeping order;"
    "a function that flattens a nested list;a command-line tool that prints the lines of a file in reverse;"
    "a function that validates an e-mail address with a regular expression;a function that computes a SHA-256 of a file"
).split(";")
CODE_LANGUAGES = ("Python", "JavaScript", "Go", "Rust")
CHAT_QUESTIONS = (  # noqa: SIM905 (plain chat: prose a draft model guesses less of)
    "Why is the sky blue?;What should I pack for a week of walking in the mountains?;"
    "How do bees make honey?;What are good habits for a first job?;Why do leaves change colour in autumn?;"
    "How does a bicycle stay upright?;What is the difference between weather and climate?;"
    "How can I sleep better before an exam?;Why do cats purr?;What makes a good short story?;"
    "How did people navigate before maps?;What should I know before adopting a dog?"
).split(";")


def _kind_requests(prompts: Sequence[str], codec: TokenCodec, n: int, output_len: int, seed: int) -> list[RequestSpec]:
    order = list(range(len(prompts)))
    random.Random(seed).shuffle(order)
    chosen = [prompts[order[i % len(order)]] for i in range(n)]
    return [RequestSpec(p, len(codec.encode(p)), output_len) for p in chosen]


def code_requests(codec: TokenCodec, n: int, input_len: int, output_len: int, seed: int = 0) -> list[RequestSpec]:
    """``n`` requests to write code (a task in a language), drawn from ``seed``; their own length, not ``input_len``."""
    prompts = [f"Write {task} in {lang}. Answer with the code only." for task in CODE_TASKS for lang in CODE_LANGUAGES]
    return _kind_requests(prompts, codec, n, output_len, seed)


def chat_requests(codec: TokenCodec, n: int, input_len: int, output_len: int, seed: int = 0) -> list[RequestSpec]:
    """``n`` plain chat questions, drawn from ``seed``; their own length, not ``input_len``."""
    return _kind_requests(CHAT_QUESTIONS, codec, n, output_len, seed)


DATASETS: dict[str, Callable[..., list[RequestSpec]]] = {  # (codec, n, input or prefix length, output length, seed=)
    "random": random_requests,
    "mixed": mixed_chat_requests,
    "shared-prefix": shared_prefix_requests,
    "code": code_requests,
    "chat": chat_requests,
}


def parse_sharegpt(data: Any) -> list[tuple[str, str]]:
    """(first human turn, first model reply) of every conversation in a ShareGPT-format document."""
    if not isinstance(data, list):
        raise ValueError("a ShareGPT file is a JSON list of conversations")
    turns = [e.get("conversations") for e in data if isinstance(e, dict)]
    firsts = [t[:2] for t in turns if isinstance(t, list) and len(t) >= 2 and all(isinstance(x, dict) for x in t[:2])]
    texts = [(h.get("value"), r.get("value")) for h, r in firsts if h.get("from") in ("human", "user")]
    return [(h, r) for h, r in texts if isinstance(h, str) and isinstance(r, str)]


def sharegpt_requests(
    codec: TokenCodec, path: Path, n: int, output_len: int | None = None, seed: int = 0
) -> list[RequestSpec]:
    """``n`` first human turns sampled from a ShareGPT JSON file, each to generate its reply's length
    (or ``output_len``); filtered as vLLM does (under 4 tokens, a prompt over 1,024 or both over 2,048: skipped)."""
    pairs, out = parse_sharegpt(json.loads(path.read_text())), list[RequestSpec]()
    random.Random(seed).shuffle(pairs)
    for prompt, reply in pairs:
        if len(out) == n:
            break
        prompt_len = len(codec.encode(prompt))
        reply_len = len(codec.encode(reply)) if output_len is None else output_len
        if 4 <= prompt_len <= 1024 and reply_len >= 4 and prompt_len + reply_len <= 2048:
            out.append(RequestSpec(prompt, prompt_len, reply_len))
    if len(out) < n:
        raise ValueError(f"{path} has only {len(out)} usable conversations, {n} were asked for")
    return out
