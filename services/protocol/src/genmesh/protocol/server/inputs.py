"""Request bodies checked before any work: JSON that parses, valid Unicode, bounded nesting.

Every hop decodes a body with ``decode_json_object``. orjson does the fast path: it refuses
invalid UTF-8, lone surrogates (``"\\ud800"``), ``NaN`` / ``Infinity`` and numbers that overflow
a double, and nesting past 1,024 levels. Nesting past ``max_depth`` (64 by default) is refused
here by ``nested_deeper``, a scan of the bytes at C speed (``re`` and ``bytes`` methods, linear in
the body's size: a wide 4 MiB body costs milliseconds, ``genmesh-bench json-depth``), which only
runs when the body has that many brackets at all; the path named in the refusal is looked for
only in the first ``_PATH_VISITS`` containers (a walk in Python). When orjson
refuses a body, the standard library parses it again, only to name the field at fault in the
400 (``param``). Integers are checked per field by the wire models (``common.py``): orjson turns
one past 64 bits into a float, which no integer field with a bound accepts.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate, chain
from operator import sub
from typing import Any

import orjson

from ..errors import OpenAIError, invalid_request, quote

_SURROGATE = re.compile("[\ud800-\udfff]")
_RUNS = re.compile(rb"\[+|\]+")
_NOT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")
_AS_SQUARE = bytes.maketrans(b"{}", b"[]")
_PATH_VISITS = 10_000  # containers walked to name where a too-deep body is too deep


def decode_json_object(raw: bytes, max_depth: int, max_containers: int) -> dict[str, Any]:
    """The body as a JSON object, or a 400 (``code="invalid_json"``) naming what is wrong and where.

    A body of more than ``max_containers`` arrays and objects is refused before it is parsed: a
    wide body (``[{},{},...]``) costs orjson a Python object per container, so parsing 4 MiB of
    them would hold the event loop (and the GIL) for hundreds of ms and take ~23 times its size."""
    brackets = raw.count(b"[") + raw.count(b"{")  # opening ones, strings included: at least the containers
    if brackets > max_containers and containers(raw) > max_containers:
        raise invalid_request(
            f"the JSON body holds more than {max_containers} arrays and objects (max_json_containers)",
            code="invalid_json",
        )
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _diagnose(raw, str(exc), max_depth) from None
    if not isinstance(data, dict):
        raise invalid_request("The request body must be a JSON object", code="invalid_json")
    if brackets > max_depth and nested_deeper(raw, max_depth):
        raise _nested(too_deep(data, max_depth, _PATH_VISITS) or "", max_depth)
    return data


def nested_deeper(raw: bytes, max_depth: int) -> bool:
    """Whether valid JSON ``raw`` nests containers more than ``max_depth`` deep, at C speed: its
    brackets alone (``_brackets``); then passes that each take out every innermost
    ``[]`` pair (one level: ``bytes.replace`` never looks at what it has just joined) while a pass
    takes out at least half of what is left (a wide body is empty after its depth's few passes);
    past that, the depth is summed over the runs of ``[`` and of ``]`` (a deep body has long runs)."""
    shape = _brackets(raw)
    if b"[" * (max_depth + 1) in shape:
        return True
    levels = 0  # taken out so far
    while shape and levels <= max_depth:
        fewer = shape.replace(b"[]", b"")
        levels += 1
        shrunk, shape = len(fewer) * 2 <= len(shape), fewer
        if not shrunk:
            break
    if not shape or levels > max_depth:
        return bool(shape)
    runs = _RUNS.findall(shape)  # alternate, from a run of "[" (the shape is balanced)
    opened = accumulate(map(len, runs[0::2]))
    closed = chain((0,), accumulate(map(len, runs[1::2])))
    return levels + max(map(sub, opened, closed), default=0) > max_depth


def containers(raw: bytes) -> int:
    """How many arrays and objects valid JSON ``raw`` holds, at C speed (brackets in strings left out)."""
    return _brackets(raw).count(b"[")


def _brackets(raw: bytes) -> bytes:
    """``raw`` without its strings (escaped backslashes, then escaped quotes taken out, every other
    piece between quotes kept), its brackets alone kept, each as ``[`` or ``]``."""
    shape = raw
    if b'"' in shape:
        if b"\\" in shape:
            shape = shape.replace(b"\\\\", b"").replace(b'\\"', b"")
        shape = b"".join(shape.split(b'"')[::2])
    return shape.translate(_AS_SQUARE, _NOT_BRACKETS)


def too_deep(value: Any, max_depth: int, max_visits: int | None = None) -> str | None:
    """The path of the first value nested deeper than ``max_depth`` containers, else None (also
    when ``max_visits`` containers were walked without finding it)."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    visits = 0
    while stack:
        visits += 1
        if max_visits is not None and visits > max_visits:
            return None
        node, depth, path = stack.pop()
        if isinstance(node, dict):
            children: Any = node.items()
        elif isinstance(node, list):
            children = enumerate(node)
        else:
            continue
        if depth > max_depth:
            return path
        for key, child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1, _join(path, key)))
    return None


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _nested(path: str, max_depth: int) -> OpenAIError:
    return invalid_request(
        f"the JSON body is nested more than {max_depth} levels deep", param=quote(path) or None, code="invalid_json"
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _diagnose(raw: bytes, orjson_message: str, max_depth: int) -> OpenAIError:
    """Why orjson refused ``raw``, with the field at fault when the standard parser can find it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return invalid_request(f"the request body is not valid UTF-8 (byte {exc.start})", code="invalid_json")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        return _nested("", max_depth)
    except ValueError as exc:
        return invalid_request(
            f"We could not parse the JSON body of your request: {quote(str(exc))}", code="invalid_json"
        )
    if nested_deeper(raw, max_depth):
        return _nested(too_deep(data, max_depth, _PATH_VISITS) or "", max_depth)
    found = _bad_value(data)
    if found is not None:
        path, why = found
        return invalid_request(f"invalid value at '{quote(path)}': {why}", param=quote(path) or None)
    return invalid_request(f"the request body was refused: {quote(orjson_message)}", code="invalid_json")


def _bad_value(value: Any) -> tuple[str, str] | None:
    """The first string with a lone surrogate, or number no double holds, as (path, reason)."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if not _valid_unicode(node):
                return path, "strings must be valid Unicode (a lone surrogate escape such as \\ud800 is not)"
        elif isinstance(node, float):
            if not math.isfinite(node):
                return path, "numbers must be finite"
        elif isinstance(node, dict):
            for key, child in node.items():
                if not _valid_unicode(key):
                    return path or "body", "keys must be valid Unicode (a lone surrogate escape is not)"
                stack.append((child, _join(path, key)))
        elif isinstance(node, list):
            stack.extend((child, _join(path, i)) for i, child in enumerate(node))
    return None


def _valid_unicode(text: str) -> bool:
    """False when ``text`` holds a lone surrogate (``\\ud800`` in JSON): UTF-8 cannot encode it."""
    return _SURROGATE.search(text) is None
