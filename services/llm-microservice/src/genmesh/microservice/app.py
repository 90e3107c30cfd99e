"""The microservice's ASGI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI

from genmesh.protocol import ChatCompletionRequest, CompletionRequest, ResponsesRequest
from genmesh.protocol.server.asgi import (
    BodyLimitMiddleware,
    RequestIdMiddleware,
    document_routes,
    install_error_handlers,
)

from .metrics import MicroserviceMetrics
from .observe import ObserveMiddleware
from .routes import chat, completions, responses, system
from .settings import MicroserviceSettings
from .state import MicroserviceState


def package_version() -> str:
    try:
        return version("genmesh-microservice")
    except PackageNotFoundError:
        return "0+unknown"


def create_app(settings: MicroserviceSettings) -> FastAPI:
    """Build the app; its client to the engine is made when it starts (lifespan) and closed at shutdown."""
    metrics = MicroserviceMetrics()
    app_version = package_version()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = MicroserviceState.start(settings, app_version, metrics)
        app.state.microservice = state
        try:
            yield
        finally:
            await state.close()

    app = FastAPI(title="genmesh llm-microservice", version=app_version, lifespan=lifespan)
    app.state.http_limits = settings.http_limits()
    install_error_handlers(app)

    app.include_router(chat.router)
    app.include_router(completions.router)
    app.include_router(responses.router)
    app.include_router(system.router)
    # OPEA's string ``messages`` is accepted too; the document shows the OpenAI body.
    document_routes(
        app, {chat.PATH: ChatCompletionRequest, completions.PATH: CompletionRequest, "/v1/responses": ResponsesRequest}
    )
    # The last one added runs first: the request id must be known when requests are observed.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(ObserveMiddleware, metrics=metrics)
    app.add_middleware(RequestIdMiddleware)
    return app
