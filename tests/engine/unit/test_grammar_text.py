"""Regexes, choices and clients' EBNF as grammar; and the EBNF writer reads back what it wrote."""

from __future__ import annotations

import json
import random
import re

import pytest

from genmesh.engine.grammar import GrammarError, GrammarLimits, choice_grammar, parse_ebnf, regex_grammar
from genmesh.engine.grammar.ebnf import Chars, Grammar, Lit, Ref, Repeat, alt, seq
from genmesh.engine.grammar.regex import regex_expr
from support.grammar_walk import matches, sample

LIMITS = GrammarLimits()
PATTERNS = [
    r"^[A-Z][a-z]{2,8}$",
    r"\d{3}-\d{4}",
    r"(cat|dog)s?",
    r"[^\"\\]{1,5}x",
    r"a.b",
    r"[\w.-]+@[a-z]+\.(com|org)",
    r'say "hi"\\ok',
    r"\S\D\W\d\w",
    r"(?:ab){2,3}c*?",
    r"^(yes|no)$|^maybe$",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_raw_regex_samples_match_the_pattern(pattern: str) -> None:
    g = regex_grammar(pattern, LIMITS)
    rng = random.Random(pattern)
    for _ in range(200):
        text = sample(g, rng)
        assert re.fullmatch(pattern, text, re.ASCII), (pattern, text)  # \d and \w as JSON Schema reads them


@pytest.mark.parametrize("pattern", PATTERNS)
def test_json_string_regex_samples_decode_to_a_match(pattern: str) -> None:
    g = Grammar()
    g.add("root", seq(Lit('"'), regex_expr(pattern, json=True, max_repeat=LIMITS.max_repeat), Lit('"')))
    rng = random.Random(pattern)
    for _ in range(200):
        text = sample(g, rng)
        value = json.loads(text)
        assert re.search(pattern, value, re.ASCII), (pattern, text)


def test_classes_follow_json_schema_not_python() -> None:
    space = regex_grammar(r"\s", LIMITS)
    assert all(matches(space, c) for c in (" ", "\t", "\n", "\u2028", "\u00a0"))
    assert not matches(space, "a")
    word = regex_grammar(r"\w", LIMITS)
    assert matches(word, "_")
    assert not matches(word, "ß")  # ECMA-262: \w is ASCII
    assert not matches(regex_grammar(r"\d", LIMITS), "٣")


@pytest.mark.parametrize(
    "pattern", [r"a(?=b)", r"(?<!x)y", r"(a)\1", r"\bword", r"(?i)abc", r"x^y", r"[", r"a{3,2}", r"a{257}"]
)
def test_unsupported_regexes_are_refused(pattern: str) -> None:
    with pytest.raises(GrammarError):
        regex_grammar(pattern, LIMITS)


def test_choices_are_exact() -> None:
    g = choice_grammar(["positive", "negative", 'say "x"'])
    assert matches(g, "positive")
    assert matches(g, 'say "x"')
    assert not matches(g, "positiv")
    assert not matches(g, "positive ")
    with pytest.raises(GrammarError):
        choice_grammar([])


SQL = """
# a comment
root ::= "SELECT " cols " FROM " table ( " WHERE " cond )?
cols ::= col ( ", " col ){0,3} | "*"
col ::= [a-z_] [a-z_0-9]*
table ::= [a-z]+ ("." [a-z]+)?
cond ::= col " = " ( [0-9]+ | "'" [^'\\n]* "'" )
"""


def test_a_client_grammar_is_read_checked_and_written_back() -> None:
    g = parse_ebnf(SQL, LIMITS.max_repeat)
    assert matches(g, "SELECT a, b FROM t WHERE a = 'x y'")
    assert matches(g, "SELECT * FROM s.t")
    assert not matches(g, "SELECT FROM t")
    again = parse_ebnf(g.render(), LIMITS.max_repeat)
    assert again.rules == g.rules


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("root ::= a", "never defined"),
        ('start ::= "x"', "no 'root'"),
        ('root ::= root "a"', "never finish"),
        ('root ::= (= "a") "a"', "look-ahead"),
        ('root ::= TagDispatch("a")', "macros"),
        ('start: "a"', "Lark"),
        ('root ::= "abc', "unterminated"),
        ("root ::= [a-", "unterminated"),
        ('root ::= "a" | | "b" )', "unexpected"),
        ('root ::= "a"\nroot ::= "b"', "twice"),
        ('root ::= "\\q"', "invalid escape"),
        ('root ::= "a"{5,2}', "nothing"),
        ('root ::= "a"{0,257}', "--structured-max-repeat"),
        ("", "expected a rule"),
    ],
)
def test_bad_client_grammars_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(GrammarError) as err:
        parse_ebnf(text, LIMITS.max_repeat)
    assert message in err.value.message


def test_the_writer_escapes_everything_it_writes() -> None:
    weird = 'q"b\\s\n\t\x00\x7f é 中 \U0001f600 ]^-['
    g = Grammar()
    g.add("root", seq(Lit(weird), Repeat(Chars(tuple((ord(c), ord(c)) for c in weird)), 0, 3), Ref("x")))
    g.add("x", alt(Lit(""), Chars(((0x00, 0x1F), (0x5B, 0x5E)), negated=True)))
    text = g.render()
    assert text.isascii()
    assert parse_ebnf(text, LIMITS.max_repeat).rules == g.rules


def _parses_or_refuses(text: str) -> bool:
    """Parse ``text``: a grammar that writes back to itself, or a GrammarError; nothing else."""
    try:
        g = parse_ebnf(text, LIMITS.max_repeat)
    except GrammarError:
        return False
    written = g.render()
    assert parse_ebnf(written, LIMITS.max_repeat).render() == written
    return True


def test_any_input_is_a_grammar_or_a_grammar_error() -> None:
    rng = random.Random(11)
    chars_ = [*'root::= ab"\\[]^-(){},|*+?#\n\t=x0123456789Uu', "::=", '"\\u00', "é"]
    for _ in range(2000):
        _parses_or_refuses("".join(rng.choice(chars_) for _ in range(rng.randint(0, 30))))
    tokens = ['"a"', '"\\n"', "[a-z]", "[^x]", "x", "(", ")", "|", "*", "+", "?", "{2}", "{1,3}", "\nx ::= ", '"b"']
    parsed = sum(
        _parses_or_refuses("root ::= " + " ".join(rng.choice(tokens) for _ in range(rng.randint(1, 12))))
        for _ in range(2000)
    )
    assert parsed > 100
