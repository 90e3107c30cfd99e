"""Incremental detokenisation and stop strings, on the model's real tokenizer."""

from __future__ import annotations

import pytest

from genmesh.engine.client.detokenizer import BatchDetokenizer, StepDecoder, TableDecoder
from genmesh.engine.client.stop_strings import StopMatcher
from genmesh.engine.openai.prompts import PromptTokenizer
from support.servers import DEFAULT_MODEL


@pytest.fixture(scope="module")
def tokenizer() -> PromptTokenizer:
    return PromptTokenizer(DEFAULT_MODEL)


TEXTS = [
    "Hello world, this is a plain sentence with spaces.",
    "Grüße aus Köln — naïve café, 你好世界, Ελληνικά and emoji 🚀🔥👍🏽 mixed in.",
    "  leading spaces\n\nnew lines\ttabs and    runs of spaces  ",
    "def f(x):\n    return {'a': [1, 2, 3]}  # code",
    "💡" * 30 + " long run of four-byte characters",
]


@pytest.fixture(params=["table", "batch"])
def decoder(request: pytest.FixtureRequest, tokenizer: PromptTokenizer) -> StepDecoder:
    """Both step decoders: the byte table (byte-level vocabularies) and batched tokenizer calls."""
    if request.param == "table":
        assert tokenizer.table is not None, "SmolLM2's byte-level vocabulary should round-trip"
        return TableDecoder(tokenizer.table)
    return BatchDetokenizer(tokenizer.decode_batch)


def reference(tokenizer: PromptTokenizer, ids: list[int], skip_special_tokens: bool = True) -> str:
    """OpenVINO's own decoder, never the byte table."""
    return tokenizer.decode_batch([ids], skip_special_tokens)[0]


def run_incremental(batch: StepDecoder, ids: list[int], chunk: int) -> list[str]:
    detok = batch.new_request(True)
    pieces = [ids[i : i + chunk] for i in range(0, len(ids), chunk)] or [[]]
    deltas = []
    for n, piece in enumerate(pieces):
        deltas += batch.step([(detok, piece, n == len(pieces) - 1)])
    return deltas


@pytest.mark.parametrize("text", TEXTS)
def test_one_token_at_a_time_equals_whole_decode(tokenizer: PromptTokenizer, decoder: StepDecoder, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    deltas = run_incremental(decoder, ids, 1)
    assert "".join(deltas) == reference(tokenizer, ids)
    assert "\ufffd" not in "".join(deltas)


@pytest.mark.parametrize("chunk", [2, 3, 7])
def test_chunks_of_tokens_equal_whole_decode(tokenizer: PromptTokenizer, decoder: StepDecoder, chunk: int) -> None:
    ids = tokenizer.encode(TEXTS[1] * 3, add_special_tokens=False)
    assert "".join(run_incremental(decoder, ids, chunk)) == reference(tokenizer, ids)


def test_special_tokens_kept_only_when_asked(tokenizer: PromptTokenizer, decoder: StepDecoder) -> None:
    ids = tokenizer.encode("<|im_start|>assistant\nHi<|im_end|>", add_special_tokens=False)
    kept, skipped = decoder.new_request(False), decoder.new_request(True)
    texts = decoder.step([(kept, ids, True), (skipped, ids, True)])
    assert texts == [reference(tokenizer, ids, False), reference(tokenizer, ids, True)]
    assert "<|im_end|>" in texts[0]
    assert "<|im_end|>" not in texts[1]


def test_many_requests_decoded_in_one_batch_stay_independent(tokenizer: PromptTokenizer, decoder: StepDecoder) -> None:
    ids = [tokenizer.encode(t * 2, add_special_tokens=False) for t in TEXTS]
    detoks = [decoder.new_request(True) for _ in TEXTS]
    batch = decoder
    out = ["" for _ in TEXTS]
    longest = max(len(i) for i in ids)
    for step in range(longest):
        work = [
            (d, seq[step : step + 1], step == len(seq) - 1)
            for d, seq in zip(detoks, ids, strict=True)
            if step < len(seq)
        ]
        live = [k for k, seq in enumerate(ids) if step < len(seq)]
        for k, delta in zip(live, batch.step(work), strict=True):
            out[k] += delta
    assert out == [reference(tokenizer, seq) for seq in ids]


def test_stop_string_cuts_and_holds_back() -> None:
    m = StopMatcher(["\n\nUser:"])
    sent = []
    for piece in ["Hello", " there", "\n", "\nUs", "er:", " more"]:
        text, hit = m.feed(piece)
        sent.append(text)
        if hit:
            break
    assert hit
    assert "".join(sent) == "Hello there"


def test_stop_earliest_of_several_wins_and_no_stop_passes_through() -> None:
    m = StopMatcher(["world", "lo"])
    text, hit = m.feed("hello world")
    assert hit
    assert text == "hel"
    plain = StopMatcher([])
    assert plain.feed("abc") == ("abc", False)


def test_held_back_text_is_released_at_the_end() -> None:
    m = StopMatcher(["STOP"])
    first, hit = m.feed("abcST")
    assert (first, hit) == ("ab", False)
    rest, hit = m.feed("", final=True)
    assert (rest, hit) == ("cST", False)
