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


MAX_QUOTED = 200  # characters of a client's input an error message repeats
MAX_MESSAGE = 700  # characters of any error message (with the rest, the body stays under 4 KB)
MAX_PARAM = 100


def quote(value: object, limit: int = MAX_QUOTED) -> str:
    """A client's input, safe to repeat in an error: at most ``limit`` characters, with anything
    unprintable (control characters, lone surrogates) escaped, so the body always encodes."""
    text = value if isinstance(value, str) else str(value)
    clipped = text[:limit]
    if not clipped.isprintable():
        clipped = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in clipped)
    return clipped + ("…" if len(text) > limit else "")


class OpenAIError(Exception):
    """An error that becomes ``{"error": {...}}`` with an HTTP status.

    Its message and param are clipped (and made printable), so no error body repeats a client's
    input whole or grows past 4 KB, whatever called it."""

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
        message = quote(message, MAX_MESSAGE)
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = None if param is None else quote(param, MAX_PARAM)
        self.code = None if code is None else quote(code, MAX_PARAM)
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
        f"The model '{quote(model)}' does not exist",
        status=404,
        param="model",
        code="model_not_found",
    )


def file_too_large(limit: int, what: str = "file") -> OpenAIError:
    """A 413 naming ``file``: an uploaded file (``what``) past the server's limit of ``limit`` bytes."""
    return OpenAIError(
        f"the {what} is larger than this server's limit of {limit} bytes",
        status=413,
        param="file",
        code="file_too_large",
    )


def service_unavailable(message: str, code: str = "service_unavailable", retry_after_s: int = 1) -> OpenAIError:
    """A 503, always with ``Retry-After`` (whole seconds, at least 1): the client may come back then."""
    headers = {"Retry-After": str(max(1, retry_after_s))}
    return OpenAIError(message, status=503, type="service_unavailable_error", code=code, headers=headers)


def internal_error(message: str) -> OpenAIError:
    return OpenAIError(message, status=500, type="server_error", code="internal_error")


# OpenAI's error types, and the one an HTTP status stands for when an upstream used its own.
OPENAI_ERROR_TYPES = {
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "rate_limit_error",
    "server_error",
    "service_unavailable_error",
    "upstream_error",
}
_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable_error",
}


def normalise_upstream_error(status: int, body: Any) -> OpenAIError:
    """Any engine's error body (OpenAI's, vLLM's ``"type": "BadRequestError", "code": 400``,
    OVMS's ``{"error": "text"}``) as an OpenAI error with the same status."""
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, str):
        detail = {"message": detail}
    if not isinstance(detail, dict):
        detail = {"message": body.get("message") if isinstance(body, dict) else None}
    message = detail.get("message") or f"the engine answered {status}"
    kind = detail.get("type")
    if kind not in OPENAI_ERROR_TYPES:
        kind = _TYPE_BY_STATUS.get(status, "server_error" if status >= 500 else "invalid_request_error")
    param, code = detail.get("param"), detail.get("code")
    return OpenAIError(
        str(message),
        status=status,
        type=str(kind),
        param=param if isinstance(param, str) else None,
        code=code if isinstance(code, str) else None,
    )


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
        return invalid_request(f"Unrecognized request argument supplied: {quote(param)}", param=param)
    if first.get("type") == "json_invalid":
        return invalid_request(
            f"We could not parse the JSON body of your request: {quote(first.get('msg'))}",
            param=None,
            code="invalid_json",
        )
    msg = quote(first.get("msg", "invalid value"))
    where = f"'{quote(param)}'" if param else "request body"
    return invalid_request(f"Invalid value for {where}: {msg}", param=param)
