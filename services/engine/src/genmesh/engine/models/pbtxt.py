"""A parser of the protobuf text format, without the ``.proto``: the subset OVMS graphs use.

MediaPipe graphs (``graph.pbtxt``) are protobuf text. Without the schema a parser cannot know
field types, so it keeps what the text says: quoted strings stay strings, ``true``/``false``
become booleans, numbers become ``int`` or ``float``, other bare words (enum values) stay
strings, and ``{...}`` / ``<...>`` become nested messages. Every field may repeat; a
``field: [a, b]`` list is the same as the field given twice. Extension and ``Any`` names
(``[type.googleapis.com / mediapipe.LLMCalculatorOptions]``) are kept with blanks removed.
Comments (``#``), optional ``:`` before a message, and ``,`` / ``;`` separators are accepted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeAlias

__all__ = ["Message", "PbtxtError", "Value", "parse"]


class PbtxtError(ValueError):
    """The text is not valid protobuf text format; the message says where."""


@dataclass
class Message:
    """A message: its fields in the order written (a field may occur several times)."""

    fields: list[tuple[str, Value]] = field(default_factory=list)

    def get_all(self, name: str) -> list[Value]:
        return [v for k, v in self.fields if k == name]

    def get(self, name: str) -> Value | None:
        """The last value of ``name`` (protobuf's rule for a non-repeated field), or None."""
        values = self.get_all(name)
        return values[-1] if values else None

    def messages(self, name: str) -> list[Message]:
        return [v for v in self.get_all(name) if isinstance(v, Message)]

    def to_dict(self) -> dict[str, object]:
        """Fields as a dict: the last value of each (messages converted too)."""
        return {k: v.to_dict() if isinstance(v, Message) else v for k, v in self.fields}


Value: TypeAlias = str | int | float | bool | Message


_TOKEN = re.compile(
    r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)[fF]?(?![\w.]))
  | (?P<word>-?[A-Za-z_][\w.]*)
  | (?P<punct>[{}\[\]<>:,;/])
    """,
    re.VERBOSE,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_CLOSE = {"{": "}", "<": ">"}


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    line: int


def _tokens(text: str) -> Iterator[_Tok]:
    pos, line = 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise PbtxtError(f"line {line}: unexpected character {text[pos]!r}")
        kind = m.lastgroup or ""
        if kind != "space":
            yield _Tok(kind, m.group(), line)
        line += m.group().count("\n")
        pos = m.end()


def _unquote(tok: _Tok) -> str:
    body = tok.text[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[i + 1 :])
            assert digits is not None
            out.append(chr(int(digits.group(), 8)))
            i += 1 + len(digits.group())
        elif nxt in "xX":
            digits = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2 :])
            if digits is None:
                raise PbtxtError(f"line {tok.line}: bad \\x escape in {tok.text}")
            out.append(chr(int(digits.group(), 16)))
            i += 2 + len(digits.group())
        else:
            raise PbtxtError(f"line {tok.line}: unknown escape \\{nxt} in {tok.text}")
    return "".join(out)


_BOOLS = {"true": True, "True": True, "t": True, "false": False, "False": False, "f": False}
_FLOAT_WORDS = {"inf": float("inf"), "-inf": float("-inf"), "infinity": float("inf"), "nan": float("nan")}


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = list(_tokens(text))
        self.i = 0

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def next(self, what: str) -> _Tok:
        tok = self.peek()
        if tok is None:
            last = self.toks[-1].line if self.toks else 1
            raise PbtxtError(f"line {last}: unexpected end of text, expected {what}")
        self.i += 1
        return tok

    def expect(self, text: str) -> None:
        tok = self.next(repr(text))
        if tok.text != text:
            raise PbtxtError(f"line {tok.line}: expected {text!r}, got {tok.text!r}")

    def accept(self, text: str) -> bool:
        tok = self.peek()
        if tok is not None and tok.kind == "punct" and tok.text == text:
            self.i += 1
            return True
        return False

    def message(self, close: str | None) -> Message:
        msg = Message()
        while True:
            tok = self.peek()
            if tok is None:
                if close is not None:
                    self.next(repr(close))
                return msg
            if tok.kind == "punct" and tok.text == close:
                self.i += 1
                return msg
            name = self.field_name()
            for value in self.field_values():
                msg.fields.append((name, value))
            if not self.accept(","):
                self.accept(";")

    def field_name(self) -> str:
        tok = self.next("a field name")
        if tok.kind == "word" and not tok.text.startswith("-"):
            return tok.text
        if tok.text == "[":  # extension or Any type URL: [type.googleapis.com / pkg.Type]
            parts: list[str] = []
            while not self.accept("]"):
                part = self.next("']'")
                if part.kind not in ("word", "punct") or part.text in "{}[]<>:,;":
                    raise PbtxtError(f"line {part.line}: bad extension name near {part.text!r}")
                parts.append(part.text)
            if not parts:
                raise PbtxtError(f"line {tok.line}: empty extension name")
            return "[" + "".join(parts) + "]"
        raise PbtxtError(f"line {tok.line}: expected a field name, got {tok.text!r}")

    def field_values(self) -> list[Value]:
        colon = self.accept(":")
        tok = self.peek()
        if tok is not None and tok.kind == "punct" and tok.text in _CLOSE:
            self.i += 1
            return [self.message(_CLOSE[tok.text])]
        if not colon:
            got = tok.text if tok is not None else "end of text"
            line = tok.line if tok is not None else self.toks[-1].line
            raise PbtxtError(f"line {line}: expected ':' or '{{' after a field name, got {got!r}")
        if self.accept("["):
            values: list[Value] = []
            if self.accept("]"):
                return values
            while True:
                values.append(self.value())
                if self.accept("]"):
                    return values
                self.expect(",")
        return [self.value()]

    def value(self) -> Value:
        tok = self.next("a value")
        if tok.kind == "punct" and tok.text in _CLOSE:
            return self.message(_CLOSE[tok.text])
        if tok.kind == "string":
            text = _unquote(tok)
            while (nxt := self.peek()) is not None and nxt.kind == "string":  # "a" "b" is "ab"
                self.i += 1
                text += _unquote(nxt)
            return text
        if tok.kind == "number":
            return _number(tok)
        if tok.kind == "word":
            if tok.text in _BOOLS:
                return _BOOLS[tok.text]
            if tok.text.lower() in _FLOAT_WORDS:
                return _FLOAT_WORDS[tok.text.lower()]
            if not tok.text.startswith("-"):
                return tok.text  # an enum value
        raise PbtxtError(f"line {tok.line}: expected a value, got {tok.text!r}")


def _number(tok: _Tok) -> int | float:
    text = tok.text
    if re.match(r"[-+]?0[xX]", text):
        return int(text, 16)
    if text[-1] in "fF":
        return float(text[:-1])
    if any(c in text for c in ".eE"):
        return float(text)
    return int(text, 10)


def parse(text: str) -> Message:
    """Parse protobuf text format into a ``Message``; ``PbtxtError`` says where it is wrong."""
    return _Parser(text).message(None)
