"""A batch's input file checked line by line, as OpenAI checks it before a batch starts.

The file is walked in place (``requests``: one line's bytes at a time, never a list of every
line or of parsed bodies), so checking a 50,000-line file holds the file, one parsed line and
the set of ``custom_id`` values. Each failure names its line (1-based, as an editor counts)
and, where there is one, the field; at most ``MAX_ERRORS`` are kept.

A line is an interactive request: its length is checked first, before its bytes are copied
or parsed (at most ``max_body_bytes``, the interactive body cap), then it is parsed once (here,
off the event loop) with the interactive path's nesting check (``nested_deeper``, at most
``max_json_depth``). Its ``model`` must be one the gateway serves (or left out where the
endpoint has one model, as the interactive path allows): only served names become fields of the
batch's hash and labels of its metrics. A line whose body is otherwise a bad request for the
model is not caught here: it runs, and fails alone with the 400 the interactive path gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from genmesh.protocol.batches import BatchError
from genmesh.protocol.errors import quote
from genmesh.protocol.server.inputs import containers, nested_deeper

MAX_ERRORS = 100  # validation errors a failed batch reports (the first ones)
MAX_CUSTOM_ID = 512  # characters of a custom_id


def requests(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Each non-blank line of a JSONL file with its 1-based line number."""
    for number, line in sized_requests(data, len(data)):
        assert line is not None
        yield number, line


def sized_requests(data: bytes, max_line: int) -> Iterator[tuple[int, bytes | None]]:
    """``requests``, with a line longer than ``max_line`` bytes as None (never copied)."""
    pos, number, size = 0, 0, len(data)
    while pos < size:
        end = data.find(b"\n", pos)
        if end < 0:
            end = size
        number += 1
        start, pos = pos, end + 1
        if end - start > max_line:
            yield number, None
            continue
        line = data[start:end]
        if line.strip():
            yield number, line


def count_lines(data: bytes) -> int:
    """Non-blank lines: the requests a file holds (an upload over the batch limit is refused)."""
    return sum(1 for _ in requests(data))


@dataclass
class Checked:
    """What checking found: the lines' ``custom_id`` values in order, requests per model, errors."""

    custom_ids: list[str] = field(default_factory=list)
    models: dict[str, int] = field(default_factory=dict)
    errors: list[BatchError] = field(default_factory=list)
    failed_lines: int = 0
    unknown_models: int = 0  # lines naming a model not served: they cost the key as refused requests

    def fail(self, line: int, code: str, message: str, param: str | None = None) -> None:
        self.failed_lines += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(BatchError(code=code, message=f"Line {line}: {message}", param=param, line=line))


def served_model(kinds: Mapping[str, str], endpoint: str, body: dict[str, Any]) -> str | None:
    """The served model a line's body names (``kinds``: served name -> ``chat``/``embeddings``), the
    endpoint's one model when the line leaves it out (or names a placeholder, ``$x``/``<x>``) as the
    interactive path allows, else None."""
    model = body.get("model")
    if isinstance(model, str) and model in kinds:
        return model
    kind = "embeddings" if endpoint == "/v1/embeddings" else "chat"
    of_kind = [name for name, k in kinds.items() if k == kind]
    if len(of_kind) == 1 and (model is None or (isinstance(model, str) and model.strip().startswith(("$", "<")))):
        return of_kind[0]
    return None


@dataclass(frozen=True)
class LineRules:
    """What a line may be, as an interactive request may: its bytes, its nesting, its model
    (``served``: the served model a line's ``model`` names, ``-`` when left out where allowed, else
    None)."""

    max_bytes: int
    max_depth: int
    served: Callable[[dict[str, Any]], str | None]
    max_containers: int = 100_000  # --max-json-containers (batches.py passes the setting)


def check(data: bytes, endpoint: str, max_lines: int, rules: LineRules) -> Checked:
    """Check every line of a batch's input file against the batch's ``endpoint``."""
    out = Checked()
    seen: set[str] = set()
    for number, line in sized_requests(data, rules.max_bytes):
        if len(out.custom_ids) >= max_lines:
            out.fail(number, "too_many_lines", f"a batch may hold at most {max_lines} requests", "input_file_id")
            break
        out.custom_ids.append("")  # its place, whatever the line holds
        if line is None:
            limit = rules.max_bytes
            out.fail(number, "line_too_large", f"a line may hold at most {limit} bytes (the request body cap)")
            continue
        _check_line(out, seen, number, line, endpoint, rules)
    if not out.custom_ids and not out.errors:
        out.errors.append(
            BatchError(code="empty_file", message="the input file holds no requests", param="input_file_id")
        )
    return out


def _check_line(out: Checked, seen: set[str], number: int, line: bytes, endpoint: str, rules: LineRules) -> None:
    cap = rules.max_containers
    if line.count(b"[") + line.count(b"{") > cap and containers(line) > cap:  # before a parse that would hold the GIL
        out.fail(number, "invalid_json_line", f"the line holds more than {cap} arrays and objects")
        return
    try:
        req = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        out.fail(number, "invalid_json_line", f"not valid JSON ({exc})")
        return
    if line.count(b"[") + line.count(b"{") > rules.max_depth and nested_deeper(line, rules.max_depth):
        out.fail(number, "invalid_json_line", f"the line is nested more than {rules.max_depth} levels deep")
        return
    if not isinstance(req, dict):
        out.fail(number, "invalid_request", "each line must be a JSON object")
        return
    custom_id = req.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        out.fail(number, "missing_required_parameter", "'custom_id' must be a non-empty string", "custom_id")
        return
    if len(custom_id) > MAX_CUSTOM_ID:
        out.fail(number, "invalid_value", f"'custom_id' is longer than {MAX_CUSTOM_ID} characters", "custom_id")
        return
    if custom_id in seen:
        out.fail(number, "duplicate_custom_id", f"custom_id '{quote(custom_id, 80)}' appears twice", "custom_id")
        return
    seen.add(custom_id)
    out.custom_ids[-1] = custom_id
    method = req.get("method")
    if method != "POST":
        out.fail(number, "invalid_method", f"method must be 'POST', not {quote(repr(method), 40)}", "method")
        return
    url = req.get("url")
    if url != endpoint:
        shown = quote(repr(url), 80)
        out.fail(number, "invalid_url", f"url {shown} differs from the batch's endpoint '{endpoint}'", "url")
        return
    body = req.get("body")
    if not isinstance(body, dict):
        out.fail(number, "invalid_request", "'body' must be a JSON object (the request)", "body")
        return
    for name in ("stream", "streaming"):
        if body.get(name):
            out.fail(number, "invalid_value", "a batch request may not stream ('stream': true)", f"body.{name}")
            return
    model = rules.served(body)
    if model is None:
        out.unknown_models += 1
        shown = quote(repr(body.get("model")), 80)
        out.fail(number, "model_not_found", f"model {shown} is not served here", "body.model")
        return
    out.models[model] = out.models.get(model, 0) + 1
