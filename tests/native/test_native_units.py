"""The pieces of the native APIs that need no server: how a body is told apart (TEI's or TGI's, on
the paths they share), the error statuses and shape, TEI's truncation, a TGI stream's end."""

from __future__ import annotations

import json

import pytest

from genmesh.engine.embeddings.tokenizer import truncated
from genmesh.gateway.replies import with_retry_after
from genmesh.protocol import OpenAIError, invalid_request, service_unavailable
from genmesh.protocol.native_errors import NATIVE_PATHS, native, native_body, native_status_and_body, refuses_natively
from genmesh.protocol.server.http_server import error_bytes
from genmesh.protocol.tei import is_similarity, is_tei_rerank
from genmesh.protocol.tgi import is_tgi_request
from genmesh.relay.native import TgiStreamEnd


def test_bodies_are_told_apart() -> None:
    assert is_tei_rerank({"query": "q", "texts": ["a"]})
    assert not is_tei_rerank({"query": "q", "documents": ["a"], "texts": ["a"]})
    assert is_tgi_request({"inputs": "x", "parameters": {}})
    assert is_tgi_request({"inputs": "x", "stream": False})
    assert not is_tgi_request({"inputs": "x", "normalize": True})  # feature_extraction's body
    sentence_similarity = {"inputs": {"source_sentence": "a", "sentences": ["b"]}, "parameters": {}}
    assert not is_tgi_request(sentence_similarity)
    assert is_similarity(sentence_similarity)


@pytest.mark.parametrize(
    ("err", "status", "kind"),
    [
        (native("`texts` cannot be empty", 400, "empty"), 400, "empty"),
        (native("too long", 413, "validation"), 413, "validation"),
        (invalid_request("bad", param="x"), 422, "validation"),
        (invalid_request("not JSON", code="invalid_json"), 400, "validation"),
        (OpenAIError("no such model", status=404), 404, "validation"),
        (OpenAIError("slow down", status=429, type="rate_limit_error"), 429, "overloaded"),
        (service_unavailable("loading"), 503, "unhealthy"),
        (OpenAIError("boom", status=500, type="server_error"), 500, "backend"),
    ],
)
def test_error_status_and_shape(err: OpenAIError, status: int, kind: str) -> None:
    assert native_status_and_body(err) == (status, {"error": err.message, "error_type": kind})


def test_truncation_keeps_the_special_tokens_at_either_end() -> None:
    ids = [101, 1, 2, 3, 4, 5, 102]
    assert truncated(ids, 4, special=True, left=False) == [101, 1, 2, 102]
    assert truncated(ids, 4, special=True, left=True) == [101, 4, 5, 102]
    assert truncated(ids, 4, special=False, left=True) == [3, 4, 5, 102]
    assert truncated(ids, 4, special=False, left=False) == [101, 1, 2, 3]


def test_refusals_before_the_body_are_native_on_the_native_paths() -> None:
    err = with_retry_after(OpenAIError("no key", status=401, type="invalid_request_error"), 3)
    for path in ("/embed", "/generate", "/generate_stream", "/", "/info", "/rerank", "/similarity"):
        assert refuses_natively(path)
        assert json.loads(error_bytes(err, path)) == {"error": "no key", "error_type": "validation"}
    for path in ("/v1/rerank", "/v1/embeddings", "/health"):
        assert not refuses_natively(path)
        assert json.loads(error_bytes(err, path))["error"]["message"] == "no key"
    assert "/rerank" not in NATIVE_PATHS  # after the body, Cohere's body on /rerank is refused in OpenAI's shape
    # a 429's type whatever its code; its Retry-After stays on the error (http_server and routes send it)
    busy = OpenAIError("busy", status=429, code="queue_full")
    assert native_body(busy) == {"error": "busy", "error_type": "overloaded"}
    assert err.headers["Retry-After"] == "3"


def test_a_tgi_stream_ends_with_its_generated_text_or_its_error() -> None:
    end = TgiStreamEnd()
    assert not end.ended(b'data: {"index":1,"token":{"id":5},"generated_text":null}\n\n')
    assert end.ended(b'data: {"index":2,"token":{"id":6},"generated_text":"Paris"}\n\n')
    failure = end.failure(OpenAIError("upstream stream failed", status=502, type="upstream_error"))
    assert failure.startswith(b"data: ")
    assert b"[DONE]" not in failure
    assert json.loads(failure.removeprefix(b"data: ")) == {"error": "upstream stream failed", "error_type": "backend"}
