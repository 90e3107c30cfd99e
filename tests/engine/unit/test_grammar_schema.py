"""JSON Schema → grammar: everything it derives parses and validates; what it cannot enforce is refused."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest

from genmesh.engine.grammar import FreeJsonCaps, GrammarError, GrammarLimits, any_object_grammar, schema_grammar
from support.grammar_walk import matches, sample
from support.structured_cases import FLAT, ORDER, json_layout_problem

ORDER_WITH_ID = {
    **ORDER,
    "properties": {
        "id": {"type": "string", "pattern": "^ORD-[0-9]{4}$"},
        **ORDER["properties"],
        "note": {"type": ["string", "null"], "maxLength": 30},
    },
    "required": ["id", "status", "items"],
    "additionalProperties": True,
}
PERSON = {
    "type": "object",
    "properties": {
        "height_m": {"type": "number", "minimum": 0, "maximum": 3},
        "score": {"type": "number"},
        "active": {"type": "boolean"},
        "kind": {"const": "person"},
        "born": {"type": "string", "format": "date"},
        "id": {"type": "string", "format": "uuid"},
        "debt": {"type": "number", "exclusiveMaximum": 0},
    },
    "required": ["height_m", "active", "kind"],
}
TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "label": {"type": "string", "maxLength": 5},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
            },
            "required": ["label"],
        }
    },
    "$ref": "#/$defs/node",
}
PYDANTIC_STYLE = {
    "$defs": {"Pet": {"properties": {"kind": {"enum": ["cat", "dog"], "title": "Kind", "type": "string"}}}},
    "properties": {
        "owner": {"title": "Owner", "type": "string"},
        "pet": {"anyOf": [{"$ref": "#/$defs/Pet"}, {"type": "null"}], "default": None},
        "tags": {"items": {"type": "string"}, "type": "array", "title": "Tags"},
        "pair": {"prefixItems": [{"type": "integer"}, {"type": "boolean"}], "minItems": 2, "maxItems": 2},
        "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
    "required": ["owner", "tags"],
    "title": "Model",
    "type": "object",
}
SCHEMAS = {
    "cat": FLAT,
    "order": ORDER_WITH_ID,
    "nested": ORDER,
    "person": PERSON,
    "tree": TREE,
    "pydantic": PYDANTIC_STYLE,
}
CAT = FLAT


def compile_(schema: Any) -> Any:
    return schema_grammar(schema, GrammarLimits())


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_everything_the_grammar_writes_validates(name: str) -> None:
    schema = SCHEMAS[name]
    g = compile_(schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    rng = random.Random(name)
    for _ in range(300):
        text = sample(g, rng)
        value = json.loads(text)
        validator.validate(value)
        if isinstance(value, dict):
            assert json_layout_problem(text) is None, text  # at most one space after ':' and ','


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_grammar_text_is_stable_and_small(name: str) -> None:
    text = compile_(SCHEMAS[name]).render()
    assert text == compile_(SCHEMAS[name]).render()
    assert text.startswith("root ::= ")
    assert len(text) < 8000


def test_compact_and_spaced_json_are_both_accepted() -> None:
    g = compile_(CAT)
    assert matches(g, '{"name":"Tom","age":3}')
    assert matches(g, '{"name": "Tom", "age": 3}')


@pytest.mark.parametrize(
    "text",
    [
        '{ "name":"Tom","age":3}',
        '{"name":"Tom",  "age":3}',
        '{"name":"Tom","age":3}\n',
        '{"name":"Tom","age":31}',
        '{"name":"Tom","age":-1}',
        '{"name":"Tom","age":03}',
        '{"name":"' + "x" * 21 + '","age":3}',
        '{"age":3,"name":"Tom"}',
        '{"name":"Tom"}',
        '{"name":"Tom","age":3,"x":1}',
        '{"name":"T\nm","age":3}',
    ],
)
def test_what_the_grammar_refuses(text: str) -> None:
    assert not matches(compile_(CAT), text)


def test_optional_properties_may_be_left_out_in_order() -> None:
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in "abcd"}, "required": ["c"]}
    g = compile_(schema)
    for ok in ('{"c":1}', '{"a":1,"c":2}', '{"b":1,"c":2,"d":3}', '{"a":1,"b":2,"c":3,"d":4}'):
        assert matches(g, ok), ok
    for bad in ("{}", '{"a":1}', '{"c":1,"a":2}', '{"a":1,"d":2}'):
        assert not matches(g, bad), bad


def test_all_optional_allows_the_empty_object() -> None:
    g = compile_({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}})
    for ok in ("{}", '{"a":1}', '{"b":true}', '{"a":1,"b":false}'):
        assert matches(g, ok), ok


def test_declared_properties_close_the_object_even_when_none() -> None:
    g = compile_({"type": "object", "properties": {}})
    assert matches(g, "{}")
    assert not matches(g, '{"a":1}')
    free = compile_({"type": "object"})
    assert matches(free, '{"a":1}')


def test_values_a_schema_leaves_open_have_item_and_depth_caps_but_free_strings() -> None:
    g = compile_({"type": "object", "properties": {"x": {}}, "required": ["x"]})
    assert matches(g, '{"x":"' + "y" * 1000 + '"}')
    assert matches(g, '{"x":[' + ",".join(["1"] * 16) + "]}")
    assert not matches(g, '{"x":[' + ",".join(["1"] * 17) + "]}")
    assert not matches(g, '{"x":[[[[[1]]]]]}')


def test_json_mode_caps_strings_items_and_depth() -> None:
    caps = FreeJsonCaps(max_string=40, max_key=5, max_items=3, max_depth=2)
    g = any_object_grammar(GrammarLimits(free=caps))
    assert matches(g, '{"a":"' + "x" * 40 + '"}')
    assert not matches(g, '{"a":"' + "x" * 41 + '"}')
    assert matches(g, '{"a":"x\\ny"}')
    assert not matches(g, '{"abcdef":1}')
    assert matches(g, '{"a":1,"b":2,"c":3}')
    assert not matches(g, '{"a":1,"b":2,"c":3,"d":4}')
    assert matches(g, '{"a":[1,2,3]}')
    assert not matches(g, '{"a":[1,2,3,4]}')
    assert matches(g, '{"a":{"b":1}}')
    assert not matches(g, '{"a":{"b":{"c":1}}}')


def test_json_object_mode_takes_any_object_but_no_free_whitespace() -> None:
    g = any_object_grammar(GrammarLimits())
    assert matches(g, '{"a":[1,{"b":null}],"c":"x"}')
    assert matches(g, "{}")
    assert not matches(g, '{"a":1 }')
    assert not matches(g, '{"a":\n1}')
    assert not matches(g, "[1]")
    rng = random.Random(3)
    for _ in range(200):
        assert isinstance(json.loads(sample(g, rng)), dict)


def test_unbounded_strings_escape_as_json_does() -> None:
    g = compile_({"type": "string"})
    for ok in ('"a\\"b"', '"\\u00e9"', '"line\\nbreak"', '""', '"' + "x" * 500 + '"'):
        assert matches(g, ok), ok
    assert not matches(g, '"a"b"')
    assert not matches(g, '"a\nb"')
    assert not matches(g, '"\\x41"')


def test_bounded_strings_count_exactly_and_use_no_escapes() -> None:
    g = compile_({"type": "string", "minLength": 2, "maxLength": 3})
    assert [matches(g, '"' + "é" * n + '"') for n in range(5)] == [False, False, True, True, False]
    assert not matches(g, '"a\\"b"')
    long = compile_({"type": "string", "minLength": 40, "maxLength": 250})
    assert [n for n in range(0, 270) if matches(long, '"' + "x" * n + '"')] == list(range(40, 251))
    unbounded_min = compile_({"type": "string", "minLength": 3})
    assert not matches(unbounded_min, '"ab"')
    assert matches(unbounded_min, '"abc\\n"')


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, ".properties.a.not"),
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, ".uniqueItems"),
        ({"type": "integer", "multipleOf": 5}, ".multipleOf"),
        ({"type": "object", "patternProperties": {"^x": {}}}, ".patternProperties"),
        ({"if": {"type": "string"}, "then": {"maxLength": 2}}, ".if"),
        ({"$ref": "https://example.com/schema.json"}, ".$ref"),
        ({"$ref": "#/$defs/missing"}, ".$ref"),
        ({"type": "string", "pattern": "a(?=b)"}, ".pattern"),
        ({"type": "string", "pattern": "^x+$", "maxLength": 3}, ".pattern"),
        ({"type": "integer", "minimum": 5, "maximum": 4}, ".minimum"),
        ({"allOf": [{"type": "string"}, {"maxLength": 3}]}, ".allOf"),
        ({"type": "wat"}, ".type"),
        ({"type": "string", "maxLength": 257}, ".maxLength"),
        ({"type": "array", "minItems": 4097}, ".minItems"),
        ({"type": "string", "pattern": "x{300}"}, ".pattern"),
        ({"enum": []}, ".enum"),
        ({"type": "object", "properties": {"a": False}}, ".properties.a"),
    ],
)
def test_what_cannot_be_enforced_is_refused_by_name(schema: Any, path: str) -> None:
    with pytest.raises(GrammarError) as err:
        compile_(schema)
    assert err.value.path == path


def test_deep_schemas_are_refused() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(40):
        schema = {"type": "array", "items": schema}
    with pytest.raises(GrammarError) as err:
        compile_(schema)
    assert "deeper than 32" in err.value.message
    assert compile_(schema["items"]["items"]["items"]["items"]["items"]["items"]["items"]["items"]) is not None


def test_single_allof_and_annotations_pass() -> None:
    g = compile_({"allOf": [{"type": "boolean"}], "description": "flag", "title": "F"})
    assert matches(g, "true")
    assert not matches(g, '"true"')


def test_unknown_formats_are_annotations() -> None:
    g = compile_({"type": "string", "format": "password"})
    assert matches(g, '"anything goes"')
