"""OpenAI error bodies and the exception every genmesh service raises for a bad request."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class OpenAIError(Exception):
    """An error that becomes ``{"error": {...}}`` with an HTTP status."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def to_response(self) -> ErrorResponse:
        return ErrorResponse(error=ErrorDetail(message=self.message, type=self.type, param=self.param, code=self.code))

    def body(self) -> dict[str, Any]:
        return self.to_response().model_dump()


def invalid_request(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(message, status=400, param=param, code=code)


def unsupported_parameter(param: str, detail: str = "") -> OpenAIError:
    suffix = f": {detail}" if detail else ""
    return OpenAIError(
        f"Parameter '{param}' is not supported by this server{suffix}",
        status=400,
        param=param,
        code="unsupported_parameter",
    )


def model_not_found(model: str) -> OpenAIError:
    return OpenAIError(
        f"The model '{model}' does not exist",
        status=404,
        param="model",
        code="model_not_found",
    )


def service_unavailable(message: str, code: str = "service_unavailable") -> OpenAIError:
    return OpenAIError(message, status=503, type="service_unavailable_error", code=code)


def internal_error(message: str) -> OpenAIError:
    return OpenAIError(message, status=500, type="server_error", code="internal_error")


def _loc_to_param(loc: Iterable[int | str]) -> str:
    param = ""
    for part in loc:
        if isinstance(part, int):
            param += f"[{part}]"
        else:
            param += f".{part}" if param else part
    return param


_TYPE_TAGS = {"str", "int", "float", "bool", "none", "list", "dict", "literal"}


def _is_type_tag(part: str) -> bool:
    return part in _TYPE_TAGS or part[:1].isupper() or any(c in part for c in "[-'")


def from_validation_error(exc: ValidationError | Any) -> OpenAIError:
    """Turn the first pydantic (or FastAPI) validation error into a 400 naming the parameter."""
    errors = exc.errors() if hasattr(exc, "errors") else []
    if not errors:
        return invalid_request(str(exc))
    first = errors[0]
    loc = [p for p in first.get("loc", ()) if p not in ("body",)]
    # Union members add their type names to the location; keep the request path only.
    loc = [p for p in loc if not (isinstance(p, str) and _is_type_tag(p))]
    param = _loc_to_param(loc) or None
    if first.get("type") == "extra_forbidden":
        return invalid_request(f"Unrecognized request argument supplied: {param}", param=param)
    if first.get("type") == "json_invalid":
        return invalid_request(
            f"We could not parse the JSON body of your request: {first.get('msg')}",
            param=None,
            code="invalid_json",
        )
    msg = first.get("msg", "invalid value")
    where = f"'{param}'" if param else "request body"
    return invalid_request(f"Invalid value for {where}: {msg}", param=param)
