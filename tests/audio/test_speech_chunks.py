"""Speech in bounded chunks (issue 54 item 4), its parts on their own: the chunker (every piece bounded,
the text kept), the phonemizer's one espeak-ng process per request (the real espeak-ng), and the voice
worker's round robin over requests and its stop within one job."""

from __future__ import annotations

import asyncio
import random
import re
import threading
from typing import Any

import pytest

from genmesh.engine.audio.chunking import pieces, sentences
from genmesh.engine.audio.phonemes import Phonemizer
from genmesh.engine.audio.voice import chunk_limit
from genmesh.engine.audio.worker import AudioWorker
from support.polling import until

WORDS = ("the", "river", "flows", "slowly", "through", "green", "valley", "and", "we", "watched", "sun", "go", "down")


def _texts() -> list[str]:
    rng = random.Random(54)
    made = [
        " ".join(rng.choice(WORDS) for _ in range(800)),  # no punctuation at all
        "x" * 1000,  # no space either: hard cuts
        "a. " * 1365,
        "Short one. " + "supercalifragilistic" * 9 + " then words. And? Yes! Semi; colon: end",
        "  tabs\tand\nnewlines\r\n  everywhere  ",
        "Ünïcödé wörds — ünd émoji 😀 " * 40,
    ]
    for _ in range(20):  # mixed: words, sentence ends, runs of whitespace, long tokens
        tokens = [rng.choice([*WORDS, ".", "!", "?", ";", "\n", "  ", "y" * rng.randint(1, 90)]) for _ in range(300)]
        made.append(" ".join(tokens))
    return made


@pytest.mark.parametrize("limit", [1, 7, 40, 200, 240])
def test_every_piece_is_bounded_and_the_text_is_kept(limit: int) -> None:
    for text in _texts():
        got = pieces(text, limit)
        assert all(0 < len(p) <= limit for p in got)
        assert all(p == p.strip() for p in got)
        assert re.sub(r"\s+", "", "".join(got)) == re.sub(r"\s+", "", text)  # nothing but whitespace dropped
        at = 0
        for p in got:  # each piece is the text's own, in order
            at = text.index(p, at) + len(p)


def test_a_piece_ends_at_a_sentence_end_else_a_space_else_anywhere() -> None:
    assert pieces("One two three. Four five six seven", 20) == ["One two three.", "Four five six seven"]
    assert pieces("one two three four five", 10) == ["one two", "three four", "five"]
    assert pieces("abcdefghijklmnopqrstuvwxy", 10) == ["abcdefghij", "klmnopqrst", "uvwxy"]
    assert pieces("Hi. there", 100) == ["Hi. there"]  # within reach: not cut
    assert pieces("   ", 5) == []


def test_sentences_are_pieces_of_their_own() -> None:
    assert sentences("Hello there, friend. How are you? Fine", 240) == ["Hello there, friend.", "How are you?", "Fine"]
    long = "word " * 100
    assert all(len(p) <= 50 for p in sentences("Short. " + long, 50))
    assert sentences("Short. " + long, 50)[0] == "Short."


def test_slow_speech_takes_fewer_phonemes_per_chunk() -> None:
    assert chunk_limit(200, 1.0) == chunk_limit(200, 4.0) == 200
    assert chunk_limit(200, 0.25) == 50
    assert chunk_limit(20, 0.25) == 16  # never under the floor


async def test_a_request_runs_one_espeak_ng_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real espeak-ng: 1,365 sentences, each its own phoneme string, from one process."""
    phonemizer = Phonemizer("en-us")
    started: list[Any] = []
    real = asyncio.create_subprocess_exec

    async def counted(*args: Any, **kwargs: Any) -> Any:
        started.append(args[0])
        return await real(*args, **kwargs)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", counted)
    said = await phonemizer.phonemes("a. " * 1365)
    assert len(started) == 1
    assert said == [said[0]] * 1365
    assert said[0].endswith(".")
    assert said[0] == (await phonemizer.phonemes("a."))[0]
    # clauses joined, each sentence's own end mark; a sentence with nothing to say is left out
    hello = await phonemizer.phonemes("Hello there, my friend.")
    how = await phonemizer.phonemes("How are you?")
    assert await phonemizer.phonemes("Hello there, my friend. How are you? ...") == [*hello, *how]
    assert ", " in hello[0]
    assert how[0].endswith("?")
    # text cannot write the marker between sentences: "[[" is spaced out, the sentences still line up
    assert len(await phonemizer.phonemes("[[Z;Z;Z;]] one. [[Z;Z;Z;]] two.")) == 2
    assert len(started) == 6  # one a request


async def test_the_worker_takes_one_job_from_each_request_in_turn() -> None:
    worker = AudioWorker("test", max_queued=4, timeout_s=30)
    ran: list[str] = []
    gate = threading.Event()

    def job(name: str) -> Any:
        def run(stop: threading.Event) -> str:
            if name == "long-1":
                gate.wait(10)
            ran.append(name)
            return name

        return run

    async with worker.session() as long, worker.session() as short:
        first = [long.submit(job(f"long-{i}")) for i in (1, 2, 3)]  # all queued at once
        await until(lambda: worker.pending == 2, 5, "both sessions open")
        second = short.submit(job("short-1"))
        gate.set()
        assert await short.result(second) == "short-1"
        assert [await long.result(f) for f in first] == ["long-1", "long-2", "long-3"]
    assert ran == ["long-1", "short-1", "long-2", "long-3"]
    assert worker.pending == 0
    worker.close()


async def test_a_stopped_request_frees_the_worker_after_its_running_job() -> None:
    worker = AudioWorker("test", max_queued=1, timeout_s=30)
    running = threading.Event()
    release = threading.Event()
    ran: list[int] = []

    def chunk(i: int) -> Any:
        def run(stop: threading.Event) -> int:
            running.set()
            release.wait(10)  # one inference: it cannot stop midway
            ran.append(i)
            return i

        return run

    async def speak() -> list[int]:
        async with worker.session() as session:
            return [x async for x in session.map(chunk(i) for i in range(10))]

    task = asyncio.ensure_future(speak())
    await until(running.is_set, 5, "the first chunk to run")
    task.cancel()  # the client went
    with pytest.raises(asyncio.CancelledError):
        await task
    assert worker.pending == 1  # its running chunk still holds the place
    release.set()
    await until(lambda: worker.pending == 0, 5, "the stopped request to free the worker")
    assert ran == [0]  # the chunk queued behind it never ran
    assert await worker.run(lambda stop: "next") == "next"
    worker.close()
