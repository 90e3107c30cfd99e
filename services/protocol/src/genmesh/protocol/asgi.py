"""ASGI plumbing every genmesh service uses: OpenAI error handlers, the X-Request-ID middleware,
and cancelling work when the client goes away."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import uuid
from collections.abc import Awaitable
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import OpenAIError, from_validation_error, internal_error

T = TypeVar("T")
REQUEST_ID_HEADER = "x-request-id"
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that went away first
request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
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


def error_response(err: OpenAIError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


def install_error_handlers(app: FastAPI) -> None:
    async def on_openai_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, OpenAIError)
        return error_response(exc)

    async def on_validation_error(_: Request, exc: Exception) -> JSONResponse:
        return error_response(from_validation_error(exc))

    async def on_http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error_response(OpenAIError(str(exc.detail), status=exc.status_code, type=kind))

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return error_response(internal_error(f"internal error: {type(exc).__name__}"))

    async def on_disconnect(_: Request, __: Exception) -> Response:
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    app.add_exception_handler(ClientDisconnected, on_disconnect)
    app.add_exception_handler(OpenAIError, on_openai_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)


class RequestIdMiddleware:
    """Accept ``X-Request-ID`` or create one; expose it to logs; echo it on the response."""

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


def serve(app: ASGIApp, host: str, port: int, log_level: str, switch: ShutdownSwitch | None = None) -> int:
    """Run a genmesh service with uvicorn: our JSON log handler (uvicorn's loggers propagate to
    it), no uvicorn access log (services log their own), a bounded graceful shutdown. Returns the
    exit status: 0, or what ``switch.stop`` asked for."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        log_level=log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    server = uvicorn.Server(config)
    if switch is not None:
        switch.attach(server)
    server.run()
    return switch.exit_code if switch is not None else 0


class RequestIdLogFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True
