"""Structured output: the request fields that constrain a reply, turned into one grammar.

Sources (at most one per request): OpenAI's ``response_format`` (``json_object``,
``json_schema``), vLLM's ``structured_outputs`` (``json``, ``regex``, ``choice``, ``grammar``,
``json_object``) and its older ``guided_json``, ``guided_regex``, ``guided_choice``,
``guided_grammar``. Each becomes EBNF written by ``genmesh.engine.grammar`` (no free whitespace,
bounded numbers), checked before the request reaches the engine: what cannot be enforced is a
400 naming the field, never unconstrained output.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from jsonschema import SchemaError
from jsonschema.validators import validator_for

from genmesh.protocol import ChatCompletionRequest, GuidedFields, OpenAIError, invalid_request, unsupported_parameter

from ..core.ipc import Constraint
from ..grammar import (
    Grammar,
    GrammarError,
    GrammarLimits,
    any_object_grammar,
    choice_grammar,
    parse_ebnf,
    regex_grammar,
    schema_grammar,
)

MAX_QUOTED = 200  # characters of a client's input an error message repeats
Build = Callable[[GrammarLimits], Grammar]
Source = tuple[str, Build]  # the request field that asks for a grammar, and how to build it


def check_schema(schema: Any, param: str) -> None:
    """A 400 for a schema that is not valid JSON Schema (checked before it is compiled)."""
    if not isinstance(schema, dict):
        raise invalid_request("a JSON schema must be an object", param=param)
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        raise invalid_request(f"invalid JSON schema: {_quote(exc.message)}", param=param) from exc
    except RecursionError as exc:
        raise invalid_request("the JSON schema is nested too deeply", param=param) from exc


def schema_constraint_text(schema: Any, param: str, limits: GrammarLimits) -> str:
    """EBNF for JSON valid against ``schema`` (a 400 naming ``param`` when it cannot be enforced)."""
    check_schema(schema, param)
    return _render(lambda lim: schema_grammar(schema, lim), param, limits)


def output_constraint(req: GuidedFields, limits: GrammarLimits) -> tuple[Constraint | None, str | None]:
    """The grammar the request's structured-output fields ask for, and the field that asked."""
    sources = _sources(req)
    if not sources:
        return None, None
    if len(sources) > 1:
        raise invalid_request(
            f"'{sources[0][0]}' and '{sources[1][0]}' both constrain the output; send only one of them",
            param=sources[1][0],
        )
    param, build = sources[0]
    return Constraint(grammar=_render(build, param, limits)), param


async def output_constraint_off_loop(req: GuidedFields, limits: GrammarLimits) -> tuple[Constraint | None, str | None]:
    """``output_constraint``, in a worker thread when there is a grammar to build: writing one for
    a large schema is Python work of up to seconds, during which the event loop keeps its turns."""
    if not _sources(req):
        return None, None
    return await asyncio.to_thread(output_constraint, req, limits)


def _sources(req: GuidedFields) -> list[Source]:
    found: list[Source] = []
    if isinstance(req, ChatCompletionRequest) and req.response_format is not None:
        fmt = req.response_format
        if fmt.type == "json_object":
            found.append(("response_format", _any_object))
        elif fmt.type == "json_schema":
            if fmt.json_schema is None or fmt.json_schema.json_schema is None:
                raise invalid_request(
                    "response_format of type 'json_schema' needs 'json_schema.schema'",
                    param="response_format.json_schema",
                )
            found.append(("response_format.json_schema.schema", _schema(fmt.json_schema.json_schema)))
    so = req.structured_outputs
    if so is not None:
        for name in ("structural_tag", "whitespace_pattern"):
            if getattr(so, name) is not None:
                raise unsupported_parameter(f"structured_outputs.{name}")
        named = _named("structured_outputs.", so.json_schema, so.regex, so.choice, so.grammar)
        if so.json_object:
            named.append(("structured_outputs.json_object", _any_object))
        if not named:
            raise invalid_request(
                "'structured_outputs' must name one of 'json', 'regex', 'choice', 'grammar' or 'json_object'",
                param="structured_outputs",
            )
        found += named
    if req.guided_whitespace_pattern is not None:
        raise unsupported_parameter("guided_whitespace_pattern", "this server's JSON grammars write no free whitespace")
    found += _named("guided_", req.guided_json, req.guided_regex, req.guided_choice, req.guided_grammar)
    return found


def _named(prefix: str, *values: Any) -> list[Source]:
    """vLLM's four kinds of constraint (json, regex, choice, grammar, in that order), under
    ``structured_outputs.`` or as ``guided_*`` fields."""
    kinds: tuple[tuple[str, Callable[[Any], Build]], ...] = (
        ("json", _schema),
        ("regex", _regex),
        ("choice", _choice),
        ("grammar", _ebnf),
    )
    pairs = zip(kinds, values, strict=True)
    return [(prefix + kind, make(value)) for (kind, make), value in pairs if value is not None]


def _any_object(limits: GrammarLimits) -> Grammar:
    return any_object_grammar(limits)


def _schema(value: Any) -> Build:
    def build(limits: GrammarLimits) -> Grammar:
        schema = value
        if isinstance(value, str):
            try:
                schema = json.loads(value)
            except json.JSONDecodeError as exc:
                raise GrammarError(f"the schema is not valid JSON: {exc}") from exc
        try:
            check_schema(schema, "")
        except OpenAIError as exc:
            raise GrammarError(exc.message) from exc
        return schema_grammar(schema, limits)

    return build


def _regex(value: str) -> Build:
    return lambda limits: regex_grammar(value, limits)


def _choice(value: list[str]) -> Build:
    return lambda _limits: choice_grammar(value)


def _ebnf(value: str) -> Build:
    return lambda limits: parse_ebnf(value, limits.max_repeat)


def _render(build: Build, param: str, limits: GrammarLimits) -> str:
    try:
        text = build(limits).render()
    except GrammarError as exc:
        raise invalid_request(_quote(exc.message), param=_quote(f"{param}{exc.path}")) from exc
    except RecursionError as exc:
        raise invalid_request("the structured-output constraint is nested too deeply", param=param) from exc
    if len(text.encode()) > limits.max_grammar_bytes:
        raise invalid_request(
            f"the structured-output constraint is too large: its grammar exceeds this server's limit of "
            f"{limits.max_grammar_bytes} bytes",
            param=param,
        )
    return text


def _quote(text: str) -> str:
    return text if len(text) <= MAX_QUOTED else text[:MAX_QUOTED] + "…"
