"""The body's nesting check (``nested_deeper``, a scan of the bytes) agrees with a walk of the parsed
value on every shape: wide, deep, towers, strings holding brackets, quotes and backslashes."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from genmesh.protocol import OpenAIError
from genmesh.protocol.server.inputs import containers, decode_json_object, nested_deeper


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _tree(rng: random.Random, depth: int) -> Any:
    if depth <= 0 or rng.random() < 0.15:
        return rng.choice(['a"[{\\', "]]}}", "\\", '\\\\"', 1, None, "", "x" * rng.randint(0, 5)])
    children = [_tree(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.5:
        return children
    return {f'k{i}["{{': c for i, c in enumerate(children)}


@pytest.mark.parametrize("seed", range(300))
def test_scan_agrees_with_a_walk(seed: int) -> None:
    rng = random.Random(seed)
    value = {"v": _tree(rng, rng.randint(1, 12))}
    raw = orjson.dumps(value)
    for limit in range(1, 14):
        assert nested_deeper(raw, limit) == (_depth(value) > limit), (raw, limit)


def test_towers_and_wide_shapes() -> None:
    def tower(n: int) -> bytes:
        return b"[" * n + b"]" * n

    for depth, limit in ((64, 64), (65, 64), (63, 64), (10, 9), (9, 9)):
        wide_towers = b'{"a":' + b"[" + b",".join([tower(depth - 2)] * 500) + b"]}"
        assert nested_deeper(wide_towers, limit) == (depth > limit)
    wide = b'{"a":[' + b",".join([b"{}"] * 100_000) + b"]}"
    assert nested_deeper(wide, 3) is False
    assert nested_deeper(wide, 2) is True


def test_decode_refuses_too_deep_wide_bodies() -> None:
    raw = b'{"a":[' + b",".join([b"{}"] * 100_000 + [b"[" * 70 + b"]" * 70]) + b"]}"
    with pytest.raises(OpenAIError) as err:
        decode_json_object(raw, 64, 10**6)
    assert err.value.status == 400
    assert "nested more than 64" in str(err.value.body())
    assert decode_json_object(b'{"a":[' + b",".join([b"{}"] * 100_000) + b"]}", 64, 100_002)["a"][0] == {}


def test_a_body_of_too_many_containers_is_refused_before_it_is_parsed() -> None:
    wide = b'{"a":[' + b",".join([b"{}"] * 100_000) + b"]}"
    assert containers(wide) == 100_002
    quoted = b'{"a":"[[{{\\"[{","b":[{}]}'  # brackets in strings (and an escaped quote) do not count
    assert containers(quoted) == 3
    assert decode_json_object(quoted, 64, 3)["b"] == [{}]
    with pytest.raises(OpenAIError) as err:
        decode_json_object(wide, 64, 100_001)
    assert err.value.status == 400
    assert "more than 100001 arrays and objects" in str(err.value.body())
    with pytest.raises(OpenAIError):  # the count comes first: a broken wide body is refused the same way
        decode_json_object(wide[:-1], 64, 1000)
