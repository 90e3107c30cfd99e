"""The error body of TEI and TGI, ``{"error": "...", "error_type": "..."}``, and the status each
answers with, made from the ``OpenAIError`` that every genmesh service raises.

TEI and TGI read their bodies with axum's JSON extractor: a body that is not JSON is a 400, a field
of the wrong type a 422. TGI's validation errors are 422 (``validation``); TEI's are 413
(``validation``: too many inputs, an input past the model's maximum) or 400 (``empty``). A route
that knows TEI's or TGI's own status raises ``native(...)``; any other 4xx (a 400 from the engine's
common checks) becomes a 422 ``validation``; 429 is ``overloaded``, 503 ``unhealthy``, other 5xx
``backend``."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .errors import OpenAIError, from_validation_error

NATIVE_TYPES = frozenset({"validation", "empty", "tokenizer", "overloaded", "unhealthy", "backend", "generation"})
_TYPE_BY_STATUS = {429: "overloaded", 503: "unhealthy"}


def native(message: str, status: int, error_type: str) -> OpenAIError:
    """An error whose status and ``error_type`` are TEI's or TGI's own."""
    assert error_type in NATIVE_TYPES
    return OpenAIError(message, status=status, type=error_type)


def native_status_and_body(err: OpenAIError) -> tuple[int, dict[str, Any]]:
    if err.type in NATIVE_TYPES:
        return err.status, {"error": err.message, "error_type": err.type}
    if err.code == "invalid_json":
        return 400, {"error": err.message, "error_type": "validation"}
    if err.status < 500 and err.status not in _TYPE_BY_STATUS:
        status = 422 if err.status == 400 else err.status
        return status, {"error": err.message, "error_type": "validation"}
    return err.status, {"error": err.message, "error_type": _TYPE_BY_STATUS.get(err.status, "backend")}


def native_validation_error(exc: ValidationError | Any) -> OpenAIError:
    """A body that does not fit the wire model: TEI's and TGI's 422 ``validation``, naming the field."""
    return native(from_validation_error(exc).message, 422, "validation")


def is_native_error(body: Any) -> bool:
    """Whether an upstream's error body is TEI's or TGI's shape (relayed as it is)."""
    return isinstance(body, dict) and isinstance(body.get("error"), str) and "error_type" in body
