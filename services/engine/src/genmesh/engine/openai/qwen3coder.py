"""Qwen3-Coder's XML-style tool calls (OVMS ``tool_parser: "qwen3coder"``, vLLM ``--tool-call-parser qwen3_coder``).

The model writes each call as a block; text may come before the first one, several may follow::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

A parameter's value is raw text, less exactly one leading and one trailing newline; it ends at the
first ``</parameter>`` (or, leniently, at the next ``<parameter=`` or ``</function>``). ``convert``
turns it into JSON by the type the tool's JSON schema gives that parameter (``string``: as written;
``integer`` / ``number``: a number when it reads as one; ``boolean``: ``true`` / ``false`` in any
case; ``object`` / ``array``: its JSON when it parses to one); a parameter the schema does not name,
or one without a type, is its JSON when it parses, else the text. Anything that does not convert
stays the text, so a bad value is never an error. The arguments are then one JSON object string.

``parse`` reads a whole reply: every block holding complete ``<function=NAME>...</function>``
elements gives calls, the rest is content (None when only whitespace is left). A block that opens
with anything else, or whose function is never closed (a reply cut by ``max_tokens``), stays
content, markup and all; text after a block's last complete function is content without the markup.

``Qwen3CoderStream`` reads the same replies as they stream (hermes_stream.py's pieces): content until
``<tool_call>`` opens (a trailing partial tag is held back), a call's start (index, id, name) once
``<function=NAME>`` is complete, and its whole arguments object in one fragment once ``</function>``
arrives. A call already started cannot be taken back: when the reply ends inside it, its arguments
are the parameters closed by then (a value cut mid-way is left out), where ``parse`` keeps the block
as content.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from genmesh.protocol import FunctionCall, ToolCall, ToolDefinition

from .hermes_stream import CLOSE, OPEN, ArgsDelta, CallStart, Piece, new_call_id, partial_suffix

FUNCTION_OPEN, FUNCTION_CLOSE = "<function=", "</function>"
PARAM_OPEN, PARAM_CLOSE = "<parameter=", "</parameter>"
_INTEGER = re.compile(r"\s*[-+]?[0-9]+\s*")
_NUMBER = re.compile(r"\s*[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\s*")
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),  # before int: a bool is an int
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (dict, "object"),
    (list, "array"),
    (type(None), "null"),
)
Properties = dict[str, Any]


@dataclass(frozen=True)
class _Head:
    name: str
    end: int  # where the function's body starts, in the text the head was read from


_WAIT = "wait"  # the text so far could still become a head (or a block's close)
_MAX_NAME = 256  # a longer "name" is not one (and a stream does not rescan an endless head)


def _head(text: str) -> _Head | str | None:
    """``<function=NAME>`` at the start of ``text`` (its leading whitespace already skipped): the head,
    ``_WAIT`` while the text is a proper start of one (or of ``</tool_call>``), None when it is neither.
    The answer for a text holds for every longer text that begins with it, so streamed and whole
    replies decide alike. A name is the text up to ``>`` (stripped); ``<`` or a newline first, or more
    than ``_MAX_NAME`` characters: no head."""
    if not text.startswith(FUNCTION_OPEN):
        return _WAIT if FUNCTION_OPEN.startswith(text) or CLOSE.startswith(text) else None
    start = len(FUNCTION_OPEN)
    for i in range(start, min(len(text), start + _MAX_NAME + 1)):
        if text[i] == ">":
            name = text[start:i].strip()
            return _Head(name, i + 1) if name else None
        if text[i] in "<\n":
            return None
    return _WAIT if len(text) <= start + _MAX_NAME else None


def _skip_space(text: str, at: int) -> int:
    return len(text) - len(text[at:].lstrip())


def _trim(value: str) -> str:
    """A parameter's value as written: one leading and one trailing newline are the layout's."""
    value = value.removeprefix("\n")
    return value.removesuffix("\n")


def parameters(body: str, closed: bool = True) -> list[tuple[str, str]]:
    """A function's ``<parameter=KEY>`` elements, (key, raw value) in order. ``closed`` False (the
    reply ended inside the function): a last value not yet ended is left out."""
    out: list[tuple[str, str]] = []
    at = body.find(PARAM_OPEN)
    while at != -1:
        gt = body.find(">", at + len(PARAM_OPEN))
        if gt == -1:
            break
        key, start = body[at + len(PARAM_OPEN) : gt].strip(), gt + 1
        close, nxt = body.find(PARAM_CLOSE, start), body.find(PARAM_OPEN, start)
        ends = [e for e in (close, nxt) if e != -1]
        if not ends and not closed:
            break
        end = min(ends) if ends else len(body)
        if key:
            out.append((key, _trim(body[start:end])))
        at = nxt if end != close else body.find(PARAM_OPEN, end + len(PARAM_CLOSE))
    return out


def _loads(text: str) -> tuple[bool, Any]:
    """JSON as RFC 8259 has it (no NaN or Infinity, which would make the arguments invalid JSON)."""

    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        return True, json.loads(text, parse_constant=refuse)
    except ValueError:  # json.JSONDecodeError is one
        return False, None


def _types(schema: Any) -> list[str]:
    """The JSON types a parameter's schema allows, in its order: ``type`` (a name or a list), else
    those of its ``anyOf`` / ``oneOf`` branches, else those of its ``enum`` / ``const`` values."""
    if not isinstance(schema, dict):
        return []
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind.strip().lower()]
    if isinstance(kind, list):
        return [k.strip().lower() for k in kind if isinstance(k, str)]
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list):
            return list(dict.fromkeys(t for b in branches for t in _types(b)))
    values = schema.get("enum", [schema["const"]] if "const" in schema else [])
    if not isinstance(values, list):
        return []
    return list(dict.fromkeys(next(n for k, n in _JSON_TYPES if isinstance(v, k)) for v in values if _known(v)))


def _known(value: Any) -> bool:
    return any(isinstance(value, k) for k, _ in _JSON_TYPES)


def _as(kind: str, raw: str) -> tuple[bool, Any]:
    """``raw`` read as one JSON type: (True, value) when it reads as one."""
    if kind == "string":
        return True, raw
    if kind in ("integer", "number") and _INTEGER.fullmatch(raw):
        with contextlib.suppress(ValueError):  # past Python's int digits limit: the text
            return True, int(raw)
    if kind == "number" and _NUMBER.fullmatch(raw) and not _INTEGER.fullmatch(raw):
        number = float(raw)
        return (True, number) if math.isfinite(number) else (False, None)
    if kind == "boolean" and raw.strip().lower() in ("true", "false"):
        return True, raw.strip().lower() == "true"
    if kind == "null" and raw.strip().lower() == "null":
        return True, None
    if kind in ("object", "array"):
        ok, value = _loads(raw)
        if ok and isinstance(value, dict if kind == "object" else list):
            return True, value
    return False, None


def convert(raw: str, schema: Any) -> Any:
    """A parameter's raw text as JSON, by its schema (None: a parameter the tool does not describe).
    A schema allowing several types takes the first the text reads as, ``string`` last."""
    kinds = _types(schema)
    if not kinds:
        ok, value = _loads(raw)
        return value if ok else raw
    for kind in [k for k in kinds if k != "string"] + (["string"] if "string" in kinds else []):
        ok, value = _as(kind, raw)
        if ok:
            return value
    return raw


def properties(tools: list[ToolDefinition]) -> dict[str, Properties]:
    """Each tool's parameter schemas by name (``parameters.properties``)."""
    out: dict[str, Properties] = {}
    for tool in tools:
        params = tool.function.parameters or {}
        props = params.get("properties") if isinstance(params, dict) else None
        out.setdefault(tool.function.name, props if isinstance(props, dict) else {})
    return out


def arguments(name: str, body: str, schemas: dict[str, Properties], closed: bool = True) -> str:
    """A function's body (between its head and ``</function>``) as its JSON arguments object."""
    props = schemas.get(name, {})
    args = {key: convert(raw, props.get(key)) for key, raw in parameters(body, closed)}
    return json.dumps(args, ensure_ascii=False)


def _block(text: str, at: int) -> tuple[list[tuple[str, str]], str, int]:
    """The block whose body starts at ``at`` (just after ``<tool_call>``): its complete functions
    (name, body), the text left after them up to the block's close (content), and where it ends."""
    found: list[tuple[str, str]] = []
    while True:
        at = _skip_space(text, at)
        if text.startswith(CLOSE, at):
            return found, "", at + len(CLOSE)
        head = _head(text[at:])
        close = text.find(FUNCTION_CLOSE, at + head.end) if isinstance(head, _Head) else -1
        if not isinstance(head, _Head) or close == -1:
            end = text.find(CLOSE, at)
            return found, text[at : len(text) if end == -1 else end], len(text) if end == -1 else end + len(CLOSE)
        found.append((head.name, text[at + head.end : close]))
        at = close + len(FUNCTION_CLOSE)


def parse(text: str, tools: list[ToolDefinition]) -> tuple[str | None, list[ToolCall]]:
    """Split a whole reply into its content (None when it is only calls) and its calls."""
    schemas = properties(tools)
    content: list[str] = []
    calls: list[ToolCall] = []
    at = 0
    while (start := text.find(OPEN, at)) != -1:
        content.append(text[at:start])
        found, rest, at = _block(text, start + len(OPEN))
        for name, body in found:
            calls.append(
                ToolCall(id=new_call_id(), function=FunctionCall(name=name, arguments=arguments(name, body, schemas)))
            )
        content.append(rest if found else text[start:at])
    if not calls:
        return text, []
    content.append(text[at:])
    return "".join(content).strip() or None, calls


class Qwen3CoderStream:
    """One choice's reply, split incrementally into content, call starts and each call's arguments
    (the pieces of hermes_stream.py, so the chat route streams both formats alike)."""

    def __init__(self, tools: list[ToolDefinition]) -> None:
        self._schemas = properties(tools)
        self._buf = ""  # text not yet handed out
        self._state: Callable[[list[Piece], bool], bool] = self._in_text  # reads the buffer; True: go on
        self._held = ""  # a block that is content: its markup and leading whitespace
        self._in_block = 0  # calls in the current block
        self._name = ""  # the open call's function
        self._scan = 0  # where the search for the closing tag resumes (no rescan per token)
        self.calls = 0  # calls started

    def feed(self, text: str, final: bool = False) -> list[Piece]:
        self._buf += text
        out: list[Piece] = []
        while self._state(out, final):
            pass
        return out

    def _in_text(self, out: list[Piece], final: bool) -> bool:
        at = self._buf.find(OPEN)
        if at == -1:
            keep = 0 if final else partial_suffix(self._buf, OPEN)
            _emit(out, self._buf[: len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep :]
            return False
        _emit(out, self._buf[:at])
        self._buf, self._state, self._in_block = self._buf[at + len(OPEN) :], self._in_head, 0
        return True

    def _in_head(self, out: list[Piece], final: bool) -> bool:
        """In a block, before a function (or its close)."""
        body = self._buf.lstrip()
        if body.startswith(CLOSE):
            if not self._in_block:  # an empty block: content, markup and all
                _emit(out, OPEN + self._buf[: len(self._buf) - len(body) + len(CLOSE)])
            self._buf, self._state = body[len(CLOSE) :], self._in_text
            return True
        head = _head(body)
        if head == _WAIT and not final:
            return False
        if isinstance(head, _Head):
            out.append(CallStart(self.calls, new_call_id(), head.name))
            self.calls += 1
            self._in_block += 1
            self._buf, self._name, self._state, self._scan = body[head.end :], head.name, self._in_call, 0
            return True
        # Not a function: the rest of the block is content (markup and all when it holds no call).
        self._held = "" if self._in_block else OPEN + self._buf[: len(self._buf) - len(body)]
        self._buf, self._state, self._scan = body, self._in_rest, 0
        return True

    def _in_call(self, out: list[Piece], final: bool) -> bool:
        at = self._buf.find(FUNCTION_CLOSE, self._scan)
        if at == -1:
            if final:  # cut inside the call: the parameters closed by now
                out.append(ArgsDelta(self.calls - 1, arguments(self._name, self._buf, self._schemas, closed=False)))
                self._buf, self._state = "", self._in_text
            else:
                self._scan = max(0, len(self._buf) - len(FUNCTION_CLOSE) + 1)
            return False
        out.append(ArgsDelta(self.calls - 1, arguments(self._name, self._buf[:at], self._schemas)))
        self._buf, self._state = self._buf[at + len(FUNCTION_CLOSE) :], self._in_head
        return True

    def _in_rest(self, out: list[Piece], final: bool) -> bool:
        """A block's content, held until the block closes (or the reply ends)."""
        at = self._buf.find(CLOSE, self._scan)
        if at == -1:
            if final:
                _emit(out, self._held + self._buf)
                self._buf, self._state = "", self._in_text
            else:
                self._scan = max(0, len(self._buf) - len(CLOSE) + 1)
            return False
        _emit(out, self._held + self._buf[:at] + ("" if self._in_block else CLOSE))
        self._buf, self._state, self._held = self._buf[at + len(CLOSE) :], self._in_text, ""
        return True


def _emit(out: list[Piece], text: str) -> None:
    if text:
        out.append(text)
