"""Grammars for structured output: JSON schemas, regexes, choices and clients' EBNF, written as
the EBNF OpenVINO GenAI's grammar engine compiles (see ``ebnf`` for why only one writer)."""

from __future__ import annotations

from .ebnf import Grammar, GrammarError, Lit, alt
from .free_json import FreeJsonCaps
from .json_schema import any_object_grammar, schema_grammar
from .limits import GrammarLimits
from .regex import regex_expr
from .schema_keywords import FORMATS
from .user_ebnf import parse_ebnf


def regex_grammar(pattern: str, limits: GrammarLimits) -> Grammar:
    """Output that matches ``pattern`` whole."""
    grammar = Grammar()
    grammar.add("root", regex_expr(pattern, json=False, max_repeat=limits.max_repeat))
    return grammar


def choice_grammar(choices: list[str]) -> Grammar:
    """Output that is exactly one of ``choices``."""
    if not choices:
        raise GrammarError("must list at least one choice")
    grammar = Grammar()
    grammar.add("root", alt(*(Lit(c) for c in choices)))
    return grammar


__all__ = [
    "FORMATS",
    "FreeJsonCaps",
    "Grammar",
    "GrammarError",
    "GrammarLimits",
    "any_object_grammar",
    "choice_grammar",
    "parse_ebnf",
    "regex_grammar",
    "schema_grammar",
]
