"""A client's own EBNF grammar (``guided_grammar``, ``structured_outputs.grammar``), read and checked.

The grammar is the GBNF / xgrammar dialect vLLM's clients send:

    root ::= "SELECT " column " FROM " table
    column ::= "id" | "name"      # comments run to the end of the line
    table ::= [a-z_]+ ("." [a-z_]+){0,1}

Rules are ``name ::= expression``; an expression is alternatives (``|``) of sequences of string
literals, character classes, rule names and parenthesised groups, each optionally followed by
``*``, ``+``, ``?`` or ``{m}``, ``{m,}``, ``{m,n}``. It is parsed into the grammar tree and
written out again by ``ebnf``, so what reaches the engine is always well-formed; references,
``root`` and termination are checked first. Look-ahead assertions and macros are refused.
"""

from __future__ import annotations

import re

from .ebnf import MAX_CODEPOINT, Chars, Expr, Grammar, GrammarError, Lit, Ref, alt, repeat, seq
from .regex import check_repeat

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_RULE_START = re.compile(r"([A-Za-z_][A-Za-z0-9_.\-]*)[ \t]*::=")
_REPETITION = re.compile(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}")
_SIMPLE_ESCAPES = {
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "[": "[",
    "]": "]",
    "-": "-",
    "^": "^",
    "/": "/",
    ".": ".",
    "*": "*",
    "+": "+",
    "?": "?",
    "(": "(",
    ")": ")",
    "{": "{",
    "}": "}",
    "|": "|",
    "$": "$",
}
_CLASS_ESCAPES = {
    "d": ((0x30, 0x39),),
    "w": ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
    "s": ((0x09, 0x0D), (0x20, 0x20)),
}


def parse_ebnf(text: str, max_repeat: int) -> Grammar:
    grammar = _Parser(text, max_repeat).grammar()
    grammar.check()
    return grammar


class _Parser:
    def __init__(self, text: str, max_repeat: int) -> None:
        self.text = text
        self.pos = 0
        self.max_repeat = max_repeat

    def error(self, message: str) -> GrammarError:
        line = self.text.count("\n", 0, self.pos) + 1
        column = self.pos - (self.text.rfind("\n", 0, self.pos) + 1) + 1
        return GrammarError(f"EBNF grammar, line {line}, column {column}: {message}")

    # -- lexing ----------------------------------------------------------------------------
    def skip(self) -> None:
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in " \t\r\n":
                self.pos += 1
            elif c == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end == -1 else end
            else:
                return

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def at_rule_start(self) -> bool:
        self.skip()
        return _RULE_START.match(self.text, self.pos) is not None

    # -- grammar ---------------------------------------------------------------------------
    def grammar(self) -> Grammar:
        g = Grammar()
        if not self.at_rule_start():
            if re.match(r"\s*[A-Za-z_]\w*\s*:(?!:)", self.text):
                raise self.error("Lark grammars are not supported; write the grammar in EBNF ('root ::= ...')")
            raise self.error("expected a rule ('name ::= ...')")
        while self.peek():
            m = _RULE_START.match(self.text, self.pos)
            if m is None:
                raise self.error(f"unexpected {self.peek()!r}: expected a rule ('name ::= ...')")
            name = m.group(1)
            if name in g.rules:
                raise self.error(f"rule '{name}' is defined twice")
            self.pos = m.end()
            g.rules[name] = self.alternatives()
        return g

    def alternatives(self) -> Expr:
        options = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            options.append(self.sequence())
        return alt(*options)

    def sequence(self) -> Expr:
        items: list[Expr] = []
        while True:
            c = self.peek()
            if c in ("", "|", ")") or self.at_rule_start():
                break
            items.append(self.postfix(self.primary()))
        return seq(*items)

    def primary(self) -> Expr:
        c = self.peek()
        if c == '"':
            return self.string()
        if c == "[":
            return self.char_class()
        if c == "(":
            if self.text.startswith("(=", self.pos):
                raise self.error("look-ahead assertions are not supported")
            self.pos += 1
            inner = self.alternatives()
            if self.peek() != ")":
                raise self.error("expected ')'")
            self.pos += 1
            return inner
        m = _NAME.match(self.text, self.pos)
        if m is None:
            raise self.error(f"unexpected {c!r}")
        self.pos = m.end()
        if self.text.startswith("(", self.pos):
            raise self.error(f"macros such as {m.group(0)}(...) are not supported")
        return Ref(m.group(0))

    def postfix(self, item: Expr) -> Expr:
        while True:
            c = self.peek()
            if c == "*":
                item, self.pos = repeat(item, 0, None), self.pos + 1
            elif c == "+":
                item, self.pos = repeat(item, 1, None), self.pos + 1
            elif c == "?":
                item, self.pos = repeat(item, 0, 1), self.pos + 1
            elif c == "{":
                m = _REPETITION.match(self.text, self.pos)
                if m is None:
                    raise self.error("expected a repetition such as {2}, {2,} or {2,5}")
                low = int(m.group(1))
                high = low if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                try:
                    check_repeat(low if high is None else high, self.max_repeat)
                    item = repeat(item, low, high)
                except GrammarError as exc:
                    raise self.error(exc.message) from exc
                self.pos = m.end()
            else:
                return item

    def escape(self) -> str:
        """The character an escape stands for; ``self.pos`` is on the backslash."""
        if self.pos + 1 >= len(self.text):
            raise self.error("unfinished escape")
        c = self.text[self.pos + 1]
        if c in _SIMPLE_ESCAPES:
            self.pos += 2
            return _SIMPLE_ESCAPES[c]
        digits = {"x": 2, "u": 4, "U": 8}.get(c)
        hexa = self.text[self.pos + 2 : self.pos + 2 + digits] if digits else ""
        if digits is None or len(hexa) != digits or not all(h in "0123456789abcdefABCDEF" for h in hexa):
            raise self.error(f"invalid escape '\\{c}'")
        cp = int(hexa, 16)
        if cp > MAX_CODEPOINT or 0xD800 <= cp <= 0xDFFF:
            raise self.error(f"escape '\\{c}{hexa}' is not a character")
        self.pos += 2 + digits
        return chr(cp)

    def string(self) -> Expr:
        self.pos += 1
        out: list[str] = []
        while True:
            if self.pos >= len(self.text) or self.text[self.pos] in "\r\n":
                raise self.error("unterminated string")
            c = self.text[self.pos]
            if c == '"':
                self.pos += 1
                return Lit("".join(out))
            if c == "\\":
                out.append(self.escape())
            else:
                out.append(c)
                self.pos += 1

    def char_class(self) -> Expr:
        self.pos += 1
        negated = self.text.startswith("^", self.pos)
        self.pos += negated
        ranges: list[tuple[int, int]] = []
        while True:
            if self.pos >= len(self.text) or self.text[self.pos] in "\r\n":
                raise self.error("unterminated character class")
            if self.text[self.pos] == "]":
                self.pos += 1
                break
            if self.text[self.pos] == "\\" and self.text[self.pos + 1 : self.pos + 2].lower() in _CLASS_ESCAPES:
                letter = self.text[self.pos + 1]
                if letter.isupper():
                    raise self.error(f"'\\{letter}' in a character class is not supported")
                ranges += _CLASS_ESCAPES[letter]
                self.pos += 2
                continue
            lo = self.class_char()
            if self.text.startswith("-", self.pos) and not self.text.startswith("-]", self.pos):
                self.pos += 1
                hi = self.class_char()
                if hi < lo:
                    raise self.error("a character range runs backwards")
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        if not ranges and not negated:
            raise self.error("an empty character class matches nothing")
        return Chars(tuple(ranges), negated)

    def class_char(self) -> int:
        if self.pos >= len(self.text) or self.text[self.pos] in "\r\n":
            raise self.error("unterminated character class")
        if self.text[self.pos] == "\\":
            return ord(self.escape())
        c = self.text[self.pos]
        self.pos += 1
        return ord(c)
