"""``NativeRoute``: a route of TEI's or TGI's API, whose errors, from the body's check to the
engine's refusal, come out as ``{"error", "error_type"}`` with TEI's and TGI's statuses
(``native_errors``), never as OpenAI's error object."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from ..errors import OpenAIError, invalid_request
from ..native_errors import native_validation_error
from .asgi import CheckedRoute, error_response


async def native_body(request: Request) -> dict[str, Any]:
    """The body ``CheckedRoute`` decoded (a JSON object); an empty one is a 400 as a broken one is."""
    if not await request.body():
        raise invalid_request("The request body must be a JSON object", code="invalid_json")
    body: dict[str, Any] = await request.json()
    return body


def native_response(err: OpenAIError) -> JSONResponse:
    return error_response(err, native=True)


class NativeRoute(CheckedRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def native(request: Request) -> Response:
            try:
                return await handler(request)
            except (RequestValidationError, ValidationError) as exc:
                return native_response(native_validation_error(exc))
            except OpenAIError as err:
                return native_response(err)

        return native
