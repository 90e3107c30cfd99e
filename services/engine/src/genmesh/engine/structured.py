"""``response_format``: JSON mode and JSON schemas, enforced by the engine's grammar support."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import SchemaError
from jsonschema.validators import validator_for

from genmesh.protocol import ResponseFormat, invalid_request

from .messages import Constraint


def check_schema(schema: Any, param: str) -> None:
    """A 400 for a schema that is not valid JSON Schema: the engine's grammar compiler fails on
    those inside a batched step, which would take every other request in that step with it."""
    if not isinstance(schema, dict):
        raise invalid_request("a JSON schema must be an object", param=param)
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        raise invalid_request(f"invalid JSON schema: {exc.message}", param=param) from exc


def response_constraint(fmt: ResponseFormat | None) -> Constraint | None:
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return Constraint(json_schema=json.dumps({"type": "object"}))
    if fmt.json_schema is None or fmt.json_schema.json_schema is None:
        raise invalid_request(
            "response_format of type 'json_schema' needs 'json_schema.schema'", param="response_format.json_schema"
        )
    check_schema(fmt.json_schema.json_schema, "response_format.json_schema.schema")
    return Constraint(json_schema=json.dumps(fmt.json_schema.json_schema))
