"""Chat and text completions share one envelope (``CompletionEnvelope``); the JSON stays OpenAI's."""

from __future__ import annotations

from genmesh.engine.client.n_choices import Reply
from genmesh.protocol import (
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatDelta,
    CompletionChoice,
    CompletionResponse,
)

ENVELOPE = ["id", "object", "created", "model", "choices", "usage", "system_fingerprint"]


def test_field_order_is_the_wire_order() -> None:
    assert list(CompletionResponse.model_fields) == ENVELOPE
    assert list(ChatCompletionChunk.model_fields) == [*ENVELOPE, "prompt_logprobs"]
    assert list(ChatCompletionResponse.model_fields) == [*ENVELOPE, "prompt_logprobs"]
    assert ChatCompletionResponse.model_fields["usage"].is_required()
    assert not CompletionResponse.model_fields["usage"].is_required()


def test_chunks_of_a_reply() -> None:
    reply = Reply("chatcmpl-1", "m", 7, 1, 3, True)
    chunk = reply.chunk(ChatCompletionChunk, [ChatChunkChoice(delta=ChatDelta(content="hi"))])
    assert chunk.model_dump_json() == (
        '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,'
        '"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}],"usage":null,'
        '"system_fingerprint":null,"prompt_logprobs":null}'
    )
    last = reply.usage_chunk(CompletionResponse, 2)
    assert last.model_dump_json() == (
        '{"id":"chatcmpl-1","object":"text_completion","created":7,"model":"m","choices":[],'
        '"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},"system_fingerprint":null}'
    )
    assert reply.chunk(CompletionResponse, [CompletionChoice(text="x")]).choices[0].text == "x"
