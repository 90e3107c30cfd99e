"""The output processor on fake core outputs: a pure function of what the core sends per step.

The core's messages (``messages.RequestOutput``) are written here by hand, and the decoder is the
engine's own byte-table decoder over a small made-up vocabulary; the engine tests on the real
model cover the whole path (core, processor, HTTP).
"""

from __future__ import annotations

import asyncio

from genmesh.engine.client.collector import Collector
from genmesh.engine.client.detokenizer import TableDecoder
from genmesh.engine.client.output_processor import OutputProcessor, RequestDelta, TextOptions
from genmesh.engine.client.token_table import TokenTable
from genmesh.engine.core import ipc as m

# id: bytes. 5 and 6 are the two halves of "é" (UTF-8 C3 A9); 9 is a special token.
PIECES = [b"Hello", b",", b" world", b"!", b" END", b"\xc3", b"\xa9", b" and", b" more", b"<eos>"]
TABLE = TokenTable(PIECES, frozenset({9}))


def processor() -> OutputProcessor:
    return OutputProcessor(TableDecoder(TABLE))


def out(rid: int, ids: list[int], reason: str | None = None, logprobs: list[float] | None = None) -> m.RequestOutput:
    return m.RequestOutput(rid, ids, reason, None, logprobs)


async def drain(outputs: Collector[RequestDelta]) -> RequestDelta:
    return await asyncio.wait_for(outputs.get(), 5)


async def test_steps_become_text_deltas_with_usage() -> None:
    p = processor()
    handle = p.add_request(1, prompt_tokens=7, text=TextOptions())
    assert p.process([out(1, [0, 1])]) == []
    first = await drain(handle.outputs)
    assert (first.text, first.num_tokens, first.completion_tokens, first.finished) == ("Hello,", 2, 2, False)
    p.process([out(1, [2, 3], "length")])
    last = await drain(handle.outputs)
    assert (last.text, last.num_tokens, last.finish_reason) == (" world!", 2, "length")
    assert (last.prompt_tokens, last.completion_tokens) == (7, 4)
    assert len(p) == 0  # finished: no longer in flight
    assert p.process([out(1, [3])]) == []  # a late output for a finished request is dropped
    assert not handle.outputs.pending


async def test_a_split_character_is_held_back_but_its_token_counted() -> None:
    p = processor()
    handle = p.add_request(1, 3, TextOptions())
    p.process([out(1, [5])])
    half = await drain(handle.outputs)
    assert (half.text, half.num_tokens) == ("", 1)
    p.process([out(1, [6], "stop")])
    whole = await drain(handle.outputs)
    assert (whole.text, whole.completion_tokens, whole.finish_reason) == ("é", 2, "stop")


async def test_a_stop_string_across_steps_ends_the_request_and_asks_for_an_abort() -> None:
    p = processor()
    handle = p.add_request(4, 3, TextOptions(stops=[" END"]))
    other = p.add_request(5, 3, TextOptions())
    assert p.process([out(4, [0, 2]), out(5, [0])]) == []
    held = await drain(handle.outputs)
    assert held.text == "Hello wo"  # the last len(" END") - 1 characters could begin the stop string
    stopped = p.process([out(4, [4, 7]), out(5, [1])])
    assert stopped == [4]  # the core still runs it: abort it
    end = await drain(handle.outputs)
    assert held.text + end.text == "Hello world"
    assert end.finish_reason == "stop"
    assert end.completion_tokens == 3  # " and", after the stop string in the same step, is not counted
    assert len(p) == 1  # request 5 goes on
    assert (await drain(other.outputs)).text == "Hello,"


async def test_a_stop_string_inside_a_multi_token_step_ends_text_usage_and_logprobs_at_its_token() -> None:
    # Prompt lookup hands several tokens over in one step; " END" is the second of four here, so the
    # request ends as if the tokens had come one step each: two tokens counted, two log-probabilities.
    p = processor()
    handle = p.add_request(1, 3, TextOptions(stops=[" END"]))
    assert p.process([out(1, [0, 4, 7, 8], logprobs=[-0.1, -0.2, -0.3, -0.4])]) == [1]
    got = await drain(handle.outputs)
    assert (got.text, got.finish_reason, got.completion_tokens) == ("Hello", "stop", 2)
    assert (got.token_ids, got.logprobs) == ([0, 4], [-0.1, -0.2])
    assert len(p) == 0
    # The same when the core had also ended the request in that step (by length): nothing after the stop.
    handle = p.add_request(2, 3, TextOptions(stops=[","]))
    assert p.process([out(2, [0, 1, 2], "length")]) == [2]
    got = await drain(handle.outputs)
    assert (got.text, got.finish_reason, got.completion_tokens) == ("Hello", "stop", 2)
    # Without a stop string in it, the step is one delta, as before.
    handle = p.add_request(3, 3, TextOptions(stops=["zzz"]))
    p.process([out(3, [0, 1, 2])])
    got = await drain(handle.outputs)
    assert (got.text, got.num_tokens, got.finish_reason) == ("Hello, wor", 3, None)  # len("zzz") - 1 held back


async def test_include_stop_str_in_output_keeps_the_stop_string() -> None:
    p = processor()
    handle = p.add_request(1, 3, TextOptions(stops=["!"], include_stop_str_in_output=True))
    assert p.process([out(1, [2, 3, 7])]) == [1]
    delta = await drain(handle.outputs)
    assert (delta.text, delta.finish_reason) == (" world!", "stop")


async def test_logprobs_travel_with_their_tokens_and_a_slow_consumer_gets_one_merged_delta() -> None:
    p = processor()
    handle = p.add_request(1, 3, TextOptions())
    for step, ids in enumerate([[0], [1, 2], [3]]):
        lps = [-0.5 * (step + 1)] * len(ids)
        p.process([out(1, ids, "stop" if step == 2 else None, lps)])
    # Nobody read between the steps: one pending delta holds all three.
    merged = await drain(handle.outputs)
    assert not handle.outputs.pending
    assert merged.text == "Hello, world!"
    assert merged.token_ids == [0, 1, 2, 3]
    assert merged.logprobs == [-0.5, -1.0, -1.0, -1.5]
    assert (merged.num_tokens, merged.completion_tokens, merged.finish_reason) == (4, 4, "stop")


async def test_without_logprobs_no_token_ids_are_handed_over() -> None:
    p = processor()
    handle = p.add_request(1, 3, TextOptions())
    p.process([out(1, [0], "stop")])
    delta = await drain(handle.outputs)
    assert delta.token_ids is None
    assert delta.logprobs is None


async def test_special_tokens_are_skipped_unless_asked_for() -> None:
    p = processor()
    skip = p.add_request(1, 3, TextOptions())
    keep = p.add_request(2, 3, TextOptions(skip_special_tokens=False))
    p.process([out(1, [0, 9], "stop"), out(2, [0, 9], "stop")])
    assert (await drain(skip.outputs)).text == "Hello"
    assert (await drain(keep.outputs)).text == "Hello<eos>"


async def test_errors_are_typed_and_carry_no_finish_reason() -> None:
    p = processor()
    rejected = p.add_request(1, 3, TextOptions())
    running = p.add_request(2, 3, TextOptions())
    p.process([m.RequestOutput(1, [], None, m.RequestError("rejected", "bad schema")), out(2, [0])])
    failed = await drain(rejected.outputs)
    assert failed.error == m.RequestError("rejected", "bad schema")
    assert failed.finish_reason is None
    assert failed.finished
    session = p.open_session(3)
    p.fail_all(m.RequestError("engine", "engine core process exited (exit code -9)"))
    assert len(p) == 0
    assert p.sessions == {}
    dead = await drain(running.outputs)
    assert dead.text == "Hello"  # what came before the death is kept, merged with the error
    assert dead.error is not None
    assert dead.error.kind == "engine"
    scored = await asyncio.wait_for(session.get(), 5)
    assert scored.done
    assert scored.error == "engine core process exited (exit code -9)"


async def test_an_aborted_request_gets_nothing_more() -> None:
    p = processor()
    handle = p.add_request(1, 3, TextOptions())
    assert p.abort(1)
    assert not p.abort(1)  # once only: the core is told once
    p.process([out(1, [0])])
    assert not handle.outputs.pending


async def test_beams_are_decoded_whole_with_stop_strings_applied() -> None:
    p = processor()
    handle = p.add_request(1, 3, TextOptions(stops=["!"]))
    seqs = [m.Sequence([0, 3, 7], [-0.1, -0.2, -0.3], -0.2, "length"), m.Sequence([0, 2], [-0.1, -0.4], -0.5, "stop")]
    p.process([m.RequestOutput(1, [], "stop", None, None, seqs)])
    delta = await drain(handle.outputs)
    assert delta.beams is not None
    assert [(b.text, b.finish_reason) for b in delta.beams] == [("Hello", "stop"), ("Hello world", "stop")]
    assert delta.beams[0].token_ids == [0, 3, 7]
    assert (delta.completion_tokens, delta.finish_reason) == (5, "stop")


async def test_scored_positions_reach_their_session_merged() -> None:
    p = processor()
    session = p.open_session(7)
    token = m.ScoredToken(1, -0.5, 1, [1], [-0.5])
    p.process_scored([m.ScoreOutput(7, [token]), m.ScoreOutput(8, [token]), m.ScoreOutput(7, [token, token], True)])
    got = await asyncio.wait_for(session.get(), 5)
    assert (len(got.tokens), got.done, got.error) == (3, True, None)
    assert p.close_session(7)
    assert not p.close_session(7)


async def test_the_collector_waits_for_an_item_and_never_holds_more_than_one() -> None:
    collector: Collector[list[int]] = Collector(lambda a, b: a + b)
    waiter = asyncio.create_task(collector.get())
    await asyncio.sleep(0)
    assert not waiter.done()
    collector.put([1])
    assert await asyncio.wait_for(waiter, 5) == [1]
    for i in range(100):
        collector.put([i])
    assert await collector.get() == list(range(100))
    assert not collector.pending
