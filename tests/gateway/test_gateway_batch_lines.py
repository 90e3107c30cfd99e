"""A batch line is checked as an interactive request is, in process (the whole path through a
gateway: ``test_gateway_batch.py``): a 42 MB line is refused by its length, naming its line, and
only served models pass."""

from __future__ import annotations

import functools

import orjson

from genmesh.gateway.storage.batch_validation import LineRules, check, served_model

KINDS = {"chat-model": "chat", "embed-model": "embeddings"}
URL = "/v1/chat/completions"


def _line(custom_id: str, body: dict[str, object]) -> bytes:
    return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": URL, "body": body})


def test_a_42_mb_line_is_refused_by_its_length_naming_its_line() -> None:
    rules = LineRules(4 * 1024 * 1024, 64, functools.partial(served_model, KINDS, URL))
    huge = b'{"custom_id":"big","method":"POST","url":"/v1/chat/completions","body":{"x":"' + b"x" * 42_000_000 + b'"}}'
    ok = _line("a", {"model": "chat-model", "messages": []})
    checked = check(b"\n".join([ok, b"", huge, _line("c", {"messages": []})]), URL, 100, rules)
    assert [(e.line, e.code, e.param) for e in checked.errors] == [(3, "line_too_large", None)]
    assert "4194304 bytes" in (checked.errors[0].message or "")
    assert checked.models == {"chat-model": 2}  # a line without model: the endpoint's one model


def test_only_served_models_pass_and_unknown_ones_are_counted() -> None:
    rules = LineRules(1 << 20, 64, functools.partial(served_model, KINDS, URL))
    lines = [
        _line("a", {"model": "chat-model"}),
        _line("b", {"model": "embed-model"}),  # served, of the other kind: it runs and fails alone (400)
        _line("c", {"model": "x" * 10_000}),
        _line("d", {"model": "$placeholder"}),
    ]
    checked = check(b"\n".join(lines), URL, 100, rules)
    assert [(e.line, e.code, e.param) for e in checked.errors] == [(3, "model_not_found", "body.model")]
    assert checked.unknown_models == 1
    assert checked.models == {"chat-model": 2, "embed-model": 1}
