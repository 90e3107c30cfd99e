"""What a reply is charged when its usage is past what the relay keeps (its tail is read) or
cannot be read at all (an estimate, never zero). The end-to-end charge of 16 MB embeddings
replies through the real engine is in ``test_gateway_embeddings.py``."""

from __future__ import annotations

import orjson

from genmesh.gateway.exchange.metering import Request, estimate, tokens_to_charge
from genmesh.relay import Outcome
from genmesh.relay.stream import usage_in_tail


def test_usage_is_read_from_the_last_bytes_of_a_body() -> None:
    body = orjson.dumps(
        {
            "choices": [{"message": {"content": 'quoting {"usage": {"prompt_tokens": 1}} ' * 50_000}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 34, "prompt_tokens_details": {"cached_tokens": 5}},
        }
    )
    out = Outcome()
    usage_in_tail(body[-64 * 1024 :], out)
    assert (out.usage_seen, out.prompt_tokens, out.completion_tokens) == (True, 12, 34)


def test_a_quoted_usage_is_not_taken_for_the_body_s_own() -> None:
    out = Outcome()
    usage_in_tail(orjson.dumps({"text": '{"usage":{"prompt_tokens":7}}', "n": 1}), out)
    assert not out.usage_seen
    cut = Outcome()
    usage_in_tail(b'..."usage":{"prompt_tokens":3,"completion', cut)  # cut before its end
    assert not cut.usage_seen


def test_an_unread_usage_is_charged_an_estimate_never_zero() -> None:
    out = Outcome(reply_bytes=4000)
    chat = Request.of(b"x" * 400, {"max_tokens": 50}, embeddings=False)
    assert estimate(chat, out) == (100, 50)
    assert estimate(Request.of(b"x" * 400, {}, embeddings=False), out) == (100, 1000)
    assert estimate(Request.of(b"x", {}, embeddings=True), out) == (1, 0)
    assert tokens_to_charge(chat, out, 200) == (100, 50)
    assert tokens_to_charge(chat, out, 400) == (0, 0)  # a refusal without usage is not billed
    read = Outcome(prompt_tokens=3, completion_tokens=4, usage_seen=True)
    assert tokens_to_charge(chat, read, 200) == (3, 4)
