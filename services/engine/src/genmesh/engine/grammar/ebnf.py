"""A small grammar tree and the one writer of the EBNF that OpenVINO GenAI's grammar engine reads.

Every grammar the engine hands to the pipeline is written here, whatever it came from (a JSON
schema, a regex, ``guided_choice``, a client's own EBNF): a grammar the pipeline cannot compile
fails inside a batched step and takes the whole engine core down, so nothing else writes EBNF.
The syntax is xgrammar's (``name ::= expr``, ``"literals"``, ``[classes]``, ``* + ? {m,n}``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

MAX_CODEPOINT = 0x10FFFF


class GrammarError(ValueError):
    """A grammar (or the schema, regex or EBNF it comes from) that cannot be enforced.

    ``path`` locates the problem inside the client's input (``.properties.age.minimum``), so
    the API can name it in its 400.
    """

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Chars:
    """One character out of ``ranges`` (inclusive code point pairs), or out of their complement."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False


@dataclass(frozen=True)
class Seq:
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Alt:
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Repeat:
    item: Expr
    low: int
    high: int | None  # None: unbounded


@dataclass(frozen=True)
class Ref:
    name: str


Expr = Lit | Chars | Seq | Alt | Repeat | Ref

EMPTY = Lit("")


def seq(*items: Expr) -> Expr:
    """A sequence, flattened, with empty literals dropped and adjacent literals joined."""
    flat: list[Expr] = []
    for item in items:
        parts = item.items if isinstance(item, Seq) else (item,)
        for part in parts:
            if isinstance(part, Lit) and flat and isinstance(flat[-1], Lit):
                flat[-1] = Lit(flat[-1].text + part.text)
            elif part != EMPTY:
                flat.append(part)
    if not flat:
        return EMPTY
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(*items: Expr) -> Expr:
    """A choice, flattened, without repeated alternatives."""
    flat: list[Expr] = []
    seen: set[Expr] = set()  # linear, for choices of thousands (a schema's many properties)
    for item in items:
        for part in item.items if isinstance(item, Alt) else (item,):
            if part not in seen:
                seen.add(part)
                flat.append(part)
    if not flat:
        raise GrammarError("an empty choice matches nothing")
    return flat[0] if len(flat) == 1 else Alt(tuple(flat))


def opt(item: Expr) -> Expr:
    return Repeat(item, 0, 1)


def repeat(item: Expr, low: int, high: int | None) -> Expr:
    if high is not None and high < low:
        raise GrammarError(f"a repetition of at least {low} and at most {high} matches nothing")
    if high == 0 or item == EMPTY:
        return EMPTY
    if low == high == 1:
        return item
    return Repeat(item, low, high)


def chars(*spans: str | tuple[str, str], negated: bool = False) -> Chars:
    """``chars("az", "_")``: a class from ``"az"``-style ranges and single characters."""
    ranges = []
    for span in spans:
        lo, hi = (span[0], span[-1]) if isinstance(span, str) else span
        ranges.append((ord(lo), ord(hi)))
    return Chars(tuple(ranges), negated)


@dataclass
class Grammar:
    """Named rules; ``root`` is where matching starts."""

    rules: dict[str, Expr] = field(default_factory=dict)
    _suffix: dict[str, int] = field(default_factory=dict, repr=False)  # next number to try per base name

    def add(self, name: str, expr: Expr) -> Ref:
        self.rules[name] = expr
        return Ref(name)

    def fresh(self, hint: str) -> str:
        """A rule name not used yet, readable after ``hint``."""
        base = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in hint).strip("_") or "r"
        if not base[0].isalpha():
            base = "r_" + base
        base = base[:40]
        name, n = base, self._suffix.get(base, 1)
        if n > 1:
            name = f"{base}_{n}"
        while name in self.rules:
            n += 1
            name = f"{base}_{n}"
        self._suffix[base] = n
        return name

    def check(self) -> None:
        """Every reference is defined, ``root`` exists, and every rule reachable from it can end.

        A rule that can never finish (``a ::= a "x"``) is not refused by the grammar engine: it
        lets the model write anything, which is exactly what must not happen silently.
        """
        if "root" not in self.rules:
            raise GrammarError("the grammar has no 'root' rule")
        reachable = self._reachable()
        for name in sorted(reachable):
            for ref in _refs(self.rules[name]):
                if ref not in self.rules:
                    raise GrammarError(f"rule '{ref}' is used by '{name}' but never defined")
        # A worklist, so a schema with thousands of rules is checked in linear time: a rule is
        # looked at again only when a rule it uses has just been found able to end.
        users: dict[str, set[str]] = {}
        for name in reachable:
            for ref in _refs(self.rules[name]):
                users.setdefault(ref, set()).add(name)
        productive: set[str] = set()
        todo = sorted(reachable)
        while todo:
            name = todo.pop()
            if name not in productive and _can_end(self.rules[name], productive):
                productive.add(name)
                todo.extend(users.get(name, ()))
        stuck = sorted(reachable - productive)
        if stuck:
            raise GrammarError(f"rule '{stuck[0]}' can never finish (every alternative recurses into itself)")

    def _reachable(self) -> set[str]:
        seen = {"root"}
        todo = ["root"]
        while todo:
            for ref in _refs(self.rules.get(todo.pop(), EMPTY)):
                if ref not in seen and ref in self.rules:
                    seen.add(ref)
                    todo.append(ref)
        return seen

    def render(self) -> str:
        """The grammar as EBNF text, ``root`` first, only the rules reachable from it."""
        reachable = self._reachable()
        names = ["root", *sorted(n for n in reachable if n != "root")]
        return "".join(f"{name} ::= {render(self.rules[name])}\n" for name in names)


def _refs(expr: Expr) -> Iterable[str]:
    if isinstance(expr, Ref):
        yield expr.name
    elif isinstance(expr, Seq | Alt):
        for item in expr.items:
            yield from _refs(item)
    elif isinstance(expr, Repeat):
        yield from _refs(expr.item)


def _can_end(expr: Expr, productive: set[str]) -> bool:
    if isinstance(expr, Ref):
        return expr.name in productive
    if isinstance(expr, Seq):
        return all(_can_end(i, productive) for i in expr.items)
    if isinstance(expr, Alt):
        return any(_can_end(i, productive) for i in expr.items)
    if isinstance(expr, Repeat):
        return expr.low == 0 or _can_end(expr.item, productive)
    return True


# --- writing EBNF ---------------------------------------------------------------------------

_LIT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CLASS_SPECIAL = set("\\]^-[")


def _escape_char(cp: int, in_class: bool) -> str:
    c = chr(cp)
    if in_class and c in _CLASS_SPECIAL:
        return "\\" + c
    if not in_class and c in _LIT_ESCAPES:
        return _LIT_ESCAPES[c]
    if cp < 0x20 or cp == 0x7F or 0xD800 <= cp <= 0xDFFF:
        return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"
    if cp > 0x7E:
        return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"
    return c


def render(expr: Expr) -> str:
    if isinstance(expr, Lit):
        return '"' + "".join(_escape_char(ord(c), False) for c in expr.text) + '"'
    if isinstance(expr, Chars):
        if not expr.ranges and not expr.negated:
            raise GrammarError("an empty character class matches nothing")
        if not expr.ranges:
            return f"[\\x00-\\U{MAX_CODEPOINT:08x}]"
        body = "".join(
            _escape_char(lo, True) if lo == hi else f"{_escape_char(lo, True)}-{_escape_char(hi, True)}"
            for lo, hi in expr.ranges
        )
        return f"[{'^' if expr.negated else ''}{body}]"
    if isinstance(expr, Ref):
        return expr.name
    if isinstance(expr, Seq):
        return " ".join(_grouped(i, (Alt,)) for i in expr.items)
    if isinstance(expr, Alt):
        return " | ".join(render(i) for i in expr.items)
    item = _grouped(expr.item, (Seq, Alt, Repeat))
    low, high = expr.low, expr.high
    if (low, high) == (0, None):
        return item + "*"
    if (low, high) == (1, None):
        return item + "+"
    if (low, high) == (0, 1):
        return item + "?"
    if high is None:
        return f"{item}{{{low},}}"
    return f"{item}{{{low}}}" if low == high else f"{item}{{{low},{high}}}"


def _grouped(expr: Expr, kinds: tuple[type, ...]) -> str:
    text = render(expr)
    return f"({text})" if isinstance(expr, kinds) else text
