"""ASGI plumbing every genmesh service uses: OpenAI error handlers, the X-Request-ID middleware,
cancelling work when the client goes away, bodies checked before any work, and the server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import OpenAIError, from_validation_error, internal_error
from ..native_errors import NATIVE_PATHS, native_status_and_body
from .inputs import decode_json_object
from .limits import HttpLimits
from .logs import request_id_var
from .streaming import BODY_SEND
from .tracing import server_span, set_status, tracing

T = TypeVar("T")
REQUEST_ID_HEADER = "x-request-id"
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that went away first
log = logging.getLogger("genmesh.http")


class ClientDisconnected(Exception):
    """The client went away before its reply was ready."""


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; if the client goes away first, cancel it and raise ``ClientDisconnected``.

    Cancelling is what stops the work downstream: the engine aborts the generation, a proxy
    closes its upstream request.
    """
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        log.info("client disconnected; its request was cancelled")
        raise ClientDisconnected()
    return task.result()


def error_response(err: OpenAIError, native: bool = False) -> JSONResponse:
    """``err`` as OpenAI's error, or (``native``) as TEI's and TGI's, with their status."""
    if native:
        status, body = native_status_and_body(err)
        return JSONResponse(body, status_code=status, headers=err.headers)
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


def install_error_handlers(app: FastAPI) -> None:
    """Errors as OpenAI's, and as TEI's and TGI's on their paths (``NATIVE_PATHS``)."""

    def reply(request: Request, err: OpenAIError) -> JSONResponse:
        return error_response(err, request.url.path in NATIVE_PATHS)

    async def on_openai_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, OpenAIError)
        return reply(request, exc)

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        return reply(request, from_validation_error(exc))

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        code = "request_too_large" if exc.status_code == 413 else None
        return reply(request, OpenAIError(str(exc.detail), status=exc.status_code, type=kind, code=code))

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return reply(request, internal_error(f"internal error: {type(exc).__name__}"))

    async def on_disconnect(_: Request, __: Exception) -> Response:
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    app.add_exception_handler(ClientDisconnected, on_disconnect)
    app.add_exception_handler(OpenAIError, on_openai_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)


class RequestIdMiddleware:
    """Accept ``X-Request-ID`` or create one; expose it to logs; echo it on the response. Being the
    outermost of our middleware, it leaves the send it was given in the scope, for ``EventStream``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = ""
        for key, value in scope.get("headers", []):
            if key == b"x-request-id":
                rid = value.decode("latin-1")[:128]
                break
        rid = rid or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        scope[BODY_SEND] = send  # a stream's body messages skip the wrappers below (streaming.py)
        token = request_id_var.set(rid)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", rid.encode("latin-1")))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id_var.reset(token)


class ShutdownSwitch:
    """Lets a service stop its own server with an exit status, for a fault only a fresh process
    cures (the native launcher, compose or Kubernetes then starts it again)."""

    def __init__(self) -> None:
        self.exit_code = 0
        self._server: Any = None

    def attach(self, server: Any) -> None:
        self._server = server

    def stop(self, exit_code: int) -> None:
        """Shut down gracefully (lifespan clean-up runs), then exit with ``exit_code``."""
        self.exit_code = exit_code
        if self._server is not None:
            self._server.should_exit = True


class BodyLimitMiddleware:
    """A request body past ``max_bytes`` is a 413 as soon as that many bytes have come in (a
    ``Content-Length`` past it is refused by the server before the app runs: ``http_server``)."""

    def __init__(self, app: ASGIApp, limits: HttpLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        seen = 0
        max_bytes = self.limits.body_limit(scope["path"])

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > max_bytes:
                raise StarletteHTTPException(
                    413, f"the request body is larger than this server's limit of {max_bytes} bytes"
                )
            return message

        await self.app(scope, counted, send)


def body_limits(request: Request) -> HttpLimits:
    limits: HttpLimits = request.app.state.http_limits
    return limits


class CheckedRoute(APIRoute):
    """A route whose JSON body is decoded by ``decode_json_object`` (valid Unicode, bounded
    nesting) before FastAPI validates it against the route's model: a hostile body is a 400
    naming the field, before any work. ``app.state.http_limits`` gives the depth limit."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            if request.method == "POST":
                raw = await request.body()
                if raw:
                    # starlette keeps the decoded body here; FastAPI's request.json() then reuses it
                    limits = body_limits(request)
                    request._json = decode_json_object(raw, limits.max_json_depth, limits.max_json_containers)
            return await handler(request)

        return checked


def document_routes(app: FastAPI, bodies: dict[str, type[BaseModel]]) -> None:
    """Describe, in ``app``'s OpenAPI document, POST routes whose handlers read the raw body (the
    gateway's plain-ASGI hot path, the microservice's OPEA normalisation): each path's request
    body is documented as the wire model it accepts, so clients and the hostile-input suite's
    property-based tests see the same schema at every hop."""
    doc = FastAPI()
    for path, model in bodies.items():

        async def handler(body: Any) -> None:  # pragma: no cover - never served
            return None

        handler.__annotations__ = {"body": model, "return": None}
        doc.add_api_route(path, handler, methods=["POST"], response_model=None)
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = plain()
            extra = get_openapi(title=app.title, version=app.version, routes=doc.routes)
            schema.setdefault("paths", {}).update(extra["paths"])
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(extra.get("components", {}).get("schemas", {}))
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def serve(
    app: ASGIApp,
    host: str,
    port: int,
    log_level: str,
    switch: ShutdownSwitch | None = None,
    limits: HttpLimits | None = None,
) -> int:
    """Run a genmesh service with uvicorn: our JSON log handler (uvicorn's loggers propagate to
    it), no uvicorn access log (services log their own), a bounded graceful shutdown, and the
    HTTP limits (``http_server.py``). Returns the exit status: 0, or what ``switch.stop`` asked for."""
    import uvicorn

    from .http_server import protocol_class

    limits = limits or HttpLimits()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        log_level=log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=10,
        http=protocol_class(limits),
        timeout_keep_alive=limits.keep_alive_timeout_s,
    )
    server = uvicorn.Server(config)
    if switch is not None:
        switch.attach(server)
    server.run()
    return switch.exit_code if switch is not None else 0


class TracingMiddleware:
    """A SERVER span around every POST (its parent: the request's ``traceparent``, else a new trace),
    current while the app runs and ends when the response is sent, streams included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not tracing().enabled or scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        with server_span("POST", scope["path"], scope.get("headers", [])) as made:

            async def send_status(message: Message) -> None:
                if message["type"] == "http.response.start":
                    set_status(made, int(message["status"]))
                await send(message)

            await self.app(scope, receive, send_status)
