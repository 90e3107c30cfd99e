"""JSON Schema → a grammar of compact JSON text that validates against it.

What the grammar allows, beyond what the schema says:
- no free whitespace: one optional space after ``:`` and ``,``, nothing else between tokens;
- numbers within the digit caps of ``numbers``;
- properties in the order the schema declares them; an object that declares ``properties``
  (even none) gets no other keys unless ``additionalProperties`` allows them (OpenAI's strict
  mode), an object without ``properties`` takes any keys;
- ``oneOf`` is enforced as ``anyOf``; string ``format`` is enforced for the formats in
  ``FORMATS`` and is an annotation otherwise, as JSON Schema defines it.

A validation keyword the grammar cannot enforce (``not``, ``uniqueItems``, ``multipleOf``,
``if``/``then``, ...) raises ``GrammarError`` naming it: never silently unconstrained output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .ebnf import EMPTY, Expr, Grammar, GrammarError, Lit, Ref, alt, opt, repeat, seq
from .free_json import WS, free_object, free_value
from .limits import GrammarLimits
from .numbers import free_number, integer_range, number_range
from .regex import regex_expr
from .schema_keywords import ANNOTATIONS, BY_TYPE, FORMATS, TYPES, UNSUPPORTED
from .strings import bounded_string, unbounded_string


def schema_grammar(schema: Any, limits: GrammarLimits) -> Grammar:
    """The grammar whose ``root`` is JSON text valid against ``schema``."""
    grammar = Grammar()
    compiler = _Compiler(schema, grammar, limits)
    grammar.add("root", compiler.expr(schema, "", 0))
    grammar.check()
    return grammar


def any_object_grammar(limits: GrammarLimits) -> Grammar:
    """``response_format: json_object``: any JSON object within the free-JSON caps."""
    grammar = Grammar()
    grammar.add("root", free_object(grammar, limits.free))
    return grammar


def dump(value: Any) -> str:
    """A JSON value written compactly, as the grammar writes it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


class _Compiler:
    def __init__(self, root: Any, grammar: Grammar, limits: GrammarLimits) -> None:
        self.root = root
        self.g = grammar
        self.limits = limits
        self.refs: dict[str, Ref] = {}
        self.shared: dict[str, Ref] = {}

    # -- entry ---------------------------------------------------------------------------
    def expr(self, schema: Any, path: str, depth: int) -> Expr:
        if depth > self.limits.max_depth:
            raise GrammarError(f"the schema is nested deeper than {self.limits.max_depth} levels", path)
        if schema is True:
            return self.any_value()
        if schema is False:
            raise GrammarError("the schema 'false' matches nothing", path)
        if not isinstance(schema, Mapping):
            raise GrammarError("a schema must be an object or a boolean", path)
        for key in schema:
            if key in UNSUPPORTED:
                raise GrammarError(f"'{key}' cannot be enforced by this server's grammar engine", f"{path}.{key}")
        validating = {k for k in schema if k not in ANNOTATIONS}
        if "$ref" in schema:
            self._alone("$ref", validating, path)
            return self.ref(schema["$ref"], path, depth)
        if "allOf" in schema:
            return self.all_of(schema, validating, path, depth)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                self._alone(key, validating - {"nullable"}, path)
                branches = self._list(schema[key], f"{path}.{key}")
                out = alt(*(self.expr(b, f"{path}.{key}[{i}]", depth + 1) for i, b in enumerate(branches)))
                return self._nullable(schema, out)
        if "const" in schema:
            return Lit(self._dump(schema["const"], f"{path}.const"))
        if "enum" in schema:
            return self._nullable(schema, self.enum(schema, path))
        types = schema.get("type")
        if isinstance(types, list):
            if not types:
                raise GrammarError("'type' must not be an empty list", f"{path}.type")
            return alt(*(self.typed(schema, t, path, depth) for t in types))
        if types is None:
            types = self._infer(schema)
            if types is None:
                return self.any_value()
        return self._nullable(schema, self.typed(schema, types, path, depth))

    def typed(self, schema: Mapping[str, Any], kind: Any, path: str, depth: int) -> Expr:
        if kind not in TYPES:
            raise GrammarError(f"unknown type {kind!r}", f"{path}.type")
        if kind == "object":
            return self.object(schema, path, depth)
        if kind == "array":
            return self.array(schema, path, depth)
        if kind == "string":
            return self.string(schema, path)
        if kind == "integer":
            return self.integer(schema, path)
        if kind == "number":
            return self.number(schema, path)
        if kind == "boolean":
            return alt(Lit("true"), Lit("false"))
        return Lit("null")

    # -- combinators ---------------------------------------------------------------------
    def ref(self, ref: Any, path: str, depth: int) -> Expr:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise GrammarError("only references inside the schema ('#/...') are supported", f"{path}.$ref")
        if ref in self.refs:
            return self.refs[ref]
        target: Any = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            key = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, Mapping) and key in target:
                target = target[key]
            elif isinstance(target, list) and key.isdigit() and int(key) < len(target):
                target = target[int(key)]
            else:
                raise GrammarError(f"reference {ref!r} does not resolve", f"{path}.$ref")
        name = self.g.fresh("ref_" + (ref.rsplit("/", 1)[-1] or "root"))
        self.refs[ref] = rule = self.g.add(name, EMPTY)  # placeholder: a reference may recurse
        self.g.rules[name] = self.expr(target, ref[1:].replace("/", "."), depth + 1)
        return rule

    def all_of(self, schema: Mapping[str, Any], validating: set[str], path: str, depth: int) -> Expr:
        parts = self._list(schema["allOf"], f"{path}.allOf")
        if len(parts) == 1 and validating == {"allOf"}:
            return self.expr(parts[0], f"{path}.allOf[0]", depth + 1)
        raise GrammarError("'allOf' is only supported with a single schema and nothing beside it", f"{path}.allOf")

    def enum(self, schema: Mapping[str, Any], path: str) -> Expr:
        values = self._list(schema["enum"], f"{path}.enum")
        types = schema.get("type")
        wanted = {types} if isinstance(types, str) else set(types) if isinstance(types, list) else None
        if wanted is not None and "number" in wanted:
            wanted.add("integer")
        kept = [v for v in values if wanted is None or _json_type(v) in wanted]
        if not kept:
            raise GrammarError("no value of 'enum' has the schema's type", f"{path}.enum")
        return alt(*(Lit(self._dump(v, f"{path}.enum")) for v in kept))

    # -- types ---------------------------------------------------------------------------
    def object(self, schema: Mapping[str, Any], path: str, depth: int) -> Expr:
        props = schema.get("properties") or {}
        if not isinstance(props, Mapping):
            raise GrammarError("'properties' must be an object", f"{path}.properties")
        required = schema.get("required") or []
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise GrammarError("'required' must be a list of property names", f"{path}.required")
        # Declaring "properties" (even none) means no other keys unless additionalProperties says so.
        extra_schema = schema.get("additionalProperties", "properties" not in schema)
        if schema.get("unevaluatedProperties") is False:
            extra_schema = False
        members: list[tuple[Expr, bool]] = []
        for name, sub in props.items():
            value = self.expr(sub, f"{path}.properties.{name}", depth + 1)
            members.append((seq(Lit(dump(name) + ":"), WS, value), name in required))
        for name in required:
            if name not in props:
                members.append((seq(Lit(dump(name) + ":"), WS, self.any_value()), True))
        extra: Expr | None = None
        if extra_schema is not False:
            value = self.expr(extra_schema, f"{path}.additionalProperties", depth + 1)
            extra = seq(unbounded_string(self.g), Lit(":"), WS, value)
        return seq(Lit("{"), self._members(members, extra, path), Lit("}"))

    def _members(self, members: list[tuple[Expr, bool]], extra: Expr | None, path: str) -> Expr:
        """Members in order, the optional ones skippable, then any extra members."""
        comma = seq(Lit(","), WS)
        more_extra = repeat(seq(comma, extra), 0, None) if extra is not None else EMPTY
        tails: list[Expr] = [more_extra]  # tails[k]: what may follow once members before k are done
        for member, needed in reversed(members):
            step = seq(comma, member) if needed else opt(seq(comma, member))
            tail = seq(step, tails[0])
            if len(members) > 2 and tail != EMPTY:
                tail = self.g.add(self.g.fresh(f"{path or 'root'}_tail"), tail)
            tails.insert(0, tail)
        firsts: list[Expr] = []
        for i, (member, needed) in enumerate(members):
            firsts.append(seq(member, tails[i + 1]))
            if needed:
                break
        else:
            if extra is not None:
                firsts.append(seq(extra, more_extra))
            firsts.append(EMPTY)
        return alt(*firsts)

    def array(self, schema: Mapping[str, Any], path: str, depth: int) -> Expr:
        items: Any = schema.get("items", True)
        prefix: Any = schema.get("prefixItems", [])
        if isinstance(items, list):  # draft 4-7 tuples
            prefix, items = items, schema.get("additionalItems", True)
        low = self._count(schema, "minItems", path, self.limits.max_items, "--structured-max-items") or 0
        high = self._count(schema, "maxItems", path, self.limits.max_items, "--structured-max-items")
        if schema.get("uniqueItems") is True and (high is None or high > 1):
            raise GrammarError(
                "'uniqueItems' cannot be enforced by this server's grammar engine", f"{path}.uniqueItems"
            )
        comma = seq(Lit(","), WS)
        fixed = [
            self.expr(p, f"{path}.prefixItems[{i}]", depth + 1)
            for i, p in enumerate(self._list(prefix, f"{path}.prefixItems", allow_empty=True))
        ]
        if high is not None and high < len(fixed):
            raise GrammarError("'maxItems' is below the number of 'prefixItems'", f"{path}.maxItems")
        rest_low = max(low - len(fixed), 0)
        rest_high = None if high is None else high - len(fixed)
        if items is False:
            if rest_low > 0:
                raise GrammarError("'minItems' needs more items than the schema allows", f"{path}.minItems")
            rest_high = 0
        item: Expr = EMPTY
        if rest_high != 0:
            item = self._named(self.expr(items, f"{path}.items", depth + 1), f"{path or 'root'}_item")
        if fixed:
            body = seq(fixed[0], *(seq(comma, f) for f in fixed[1:]), repeat(seq(comma, item), rest_low, rest_high))
            return seq(Lit("["), body, Lit("]"))
        if rest_high == 0:
            return Lit("[]")
        upto = None if rest_high is None else rest_high - 1
        body = seq(item, repeat(seq(comma, item), max(rest_low - 1, 0), upto))
        return seq(Lit("["), body if rest_low > 0 else alt(body, EMPTY), Lit("]"))

    def string(self, schema: Mapping[str, Any], path: str) -> Expr:
        low = self._count(schema, "minLength", path, self.limits.max_repeat, "--structured-max-repeat") or 0
        high = self._count(schema, "maxLength", path, self.limits.max_repeat, "--structured-max-repeat")
        pattern = schema.get("pattern")
        fmt = schema.get("format")
        if pattern is not None or fmt in FORMATS:
            if "minLength" in schema or "maxLength" in schema:
                key = "pattern" if pattern is not None else "format"
                raise GrammarError(f"'{key}' together with 'minLength'/'maxLength' is not supported", f"{path}.{key}")
            if pattern is not None and not isinstance(pattern, str):
                raise GrammarError("'pattern' must be a string", f"{path}.pattern")
            source = pattern if isinstance(pattern, str) else FORMATS[str(fmt)]
            try:
                content = regex_expr(source, json=True, max_repeat=self.limits.max_repeat)
            except GrammarError as exc:
                raise GrammarError(exc.message, f"{path}.pattern") from exc
        else:
            return bounded_string(self.g, low, high)
        return seq(Lit('"'), content, Lit('"'))

    def integer(self, schema: Mapping[str, Any], path: str) -> Expr:
        self._multiple_of(schema, path, integer=True)
        low, high, low_ex, high_ex = self._bounds(schema, path)
        lo = None if low is None else int(low) + 1 if low_ex and float(low).is_integer() else math.ceil(low)
        hi = None if high is None else int(high) - 1 if high_ex and float(high).is_integer() else math.floor(high)
        try:
            return integer_range(lo, hi)
        except GrammarError as exc:
            raise GrammarError(exc.message, f"{path}.minimum") from exc

    def number(self, schema: Mapping[str, Any], path: str) -> Expr:
        self._multiple_of(schema, path, integer=False)
        low, high, low_ex, high_ex = self._bounds(schema, path)
        if low is None and high is None:
            return free_number()
        try:
            return number_range(low, high, low_ex, high_ex)
        except GrammarError as exc:
            raise GrammarError(exc.message, f"{path}.minimum") from exc

    # -- schema-free JSON ------------------------------------------------------------------
    # Inside a schema, open values keep the item and depth caps but not the string caps: a string
    # cap costs the grammar engine ~15 ms of compile per character, on every new schema.
    def any_value(self) -> Ref:
        return free_value(self.g, replace(self.limits.free, max_string=None, max_key=None))

    def any_object(self) -> Ref:
        return free_object(self.g, replace(self.limits.free, max_string=None, max_key=None))

    # -- helpers -------------------------------------------------------------------------
    def _named(self, expr: Expr, hint: str) -> Expr:
        if isinstance(expr, Ref | Lit):
            return expr
        return self.g.add(self.g.fresh(hint), expr)

    def _nullable(self, schema: Mapping[str, Any], expr: Expr) -> Expr:
        return alt(expr, Lit("null")) if schema.get("nullable") is True else expr

    def _alone(self, key: str, validating: set[str], path: str) -> None:
        others = sorted(validating - {key})
        if others:
            raise GrammarError(f"'{key}' together with '{others[0]}' is not supported", f"{path}.{others[0]}")

    def _infer(self, schema: Mapping[str, Any]) -> str | None:
        """The type a schema without ``type`` implies by its keywords (``format`` implies none)."""
        for kind, keys in BY_TYPE.items():
            if (keys - {"format"}) & set(schema):
                return kind
        return None

    def _list(self, value: Any, path: str, allow_empty: bool = False) -> list[Any]:
        if not isinstance(value, list):
            raise GrammarError("must be a list", path)
        if not value and not allow_empty:
            raise GrammarError("must not be an empty list", path)
        return value

    def _dump(self, value: Any, path: str) -> str:
        try:
            return dump(value)
        except (TypeError, ValueError) as exc:
            raise GrammarError(f"not a JSON value: {exc}", path) from exc

    def _count(self, schema: Mapping[str, Any], key: str, path: str, limit: int, setting: str) -> int | None:
        value = schema.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise GrammarError(f"'{key}' must be a non-negative integer", f"{path}.{key}")
        if value > limit:
            raise GrammarError(
                f"'{key}' is {value}, above this server's limit of {limit} (engine setting {setting})",
                f"{path}.{key}",
            )
        return value

    def _bounds(self, schema: Mapping[str, Any], path: str) -> tuple[float | None, float | None, bool, bool]:
        def num(key: str) -> float | None:
            value = schema.get(key)
            if value is None or isinstance(value, bool):
                return None
            if not isinstance(value, int | float) or not math.isfinite(value):
                raise GrammarError(f"'{key}' must be a finite number", f"{path}.{key}")
            return value

        low, high = num("minimum"), num("maximum")
        low_ex = high_ex = False
        ex_low, ex_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if isinstance(ex_low, bool):  # draft 4: a flag on minimum
            low_ex = ex_low and low is not None
        elif num("exclusiveMinimum") is not None:
            value = num("exclusiveMinimum")
            if low is None or (value is not None and value >= low):
                low, low_ex = value, True
        if isinstance(ex_high, bool):
            high_ex = ex_high and high is not None
        elif num("exclusiveMaximum") is not None:
            value = num("exclusiveMaximum")
            if high is None or (value is not None and value <= high):
                high, high_ex = value, True
        return low, high, low_ex, high_ex

    def _multiple_of(self, schema: Mapping[str, Any], path: str, integer: bool) -> None:
        step = schema.get("multipleOf")
        if step is None or (integer and isinstance(step, int | float) and float(step) == 1.0):
            return
        raise GrammarError("'multipleOf' cannot be enforced by this server's grammar engine", f"{path}.multipleOf")
