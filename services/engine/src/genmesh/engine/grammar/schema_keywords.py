"""JSON Schema keywords by what the grammar does with them, and the string formats it enforces."""

from __future__ import annotations

# Keywords that say nothing about which values are valid.
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "example",
        "$comment",
        "$schema",
        "$id",
        "id",
        "$anchor",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$defs",
        "definitions",
        "discriminator",
        "strict",
        "contentMediaType",
        "contentEncoding",
        "format",
    }
)
# Validation keywords a grammar cannot enforce.
UNSUPPORTED = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "patternProperties",
        "propertyNames",
        "unevaluatedItems",
        "contains",
        "minContains",
        "maxContains",
        "contentSchema",
        "$dynamicRef",
        "$recursiveRef",
    }
)
TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
BY_TYPE = {
    "object": {"properties", "required", "additionalProperties", "unevaluatedProperties"},
    "array": {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"},
    "string": {"minLength", "maxLength", "pattern", "format"},
    "integer": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"},
    "number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"},
}
_STRUCTURAL = {"$ref", "const", "enum", "anyOf", "oneOf", "allOf", "type", "nullable"}

# Years 1000-2999; days valid for their month (February stops at 28: no leap-year arithmetic).
_DATE = (
    r"[12][0-9]{3}-("
    r"(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
)
_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}T{_TIME}",
    "uuid": r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "ipv4": rf"{_OCTET}(\.{_OCTET}){{3}}",
    "email": r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63}){1,8}",
}
