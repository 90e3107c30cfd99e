"""The gateway's ASGI application: the completion endpoints as plain ASGI, the rest on FastAPI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from genmesh.protocol.asgi import RequestIdMiddleware, install_error_handlers

from .config import RoutingConfig
from .routes import admin, completions, openai, responses, stored_responses, system
from .settings import GatewaySettings
from .state import GatewayState


class GatewayApp:
    """Sends ``/v1/chat/completions`` and ``/v1/completions`` straight to the hot path, the rest
    (lifespan included) to ``api``."""

    def __init__(self, api: FastAPI) -> None:
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in completions.PATHS:
            await completions.serve(self.api.state.gateway, scope, receive, send)
        elif scope["type"] == "http" and scope["path"] == responses.PATH and scope["method"] == "POST":
            await completions.serve(self.api.state.gateway, scope, receive, send, responses.ResponsesExchange)
        else:
            await self.api(scope, receive, send)


def create_api(settings: GatewaySettings, config: RoutingConfig) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = await GatewayState.start(settings, config)
        app.state.gateway = state
        try:
            yield
        finally:
            await state.close()

    app = FastAPI(title="genmesh gateway", version="0.1.0", lifespan=lifespan)
    install_error_handlers(app)
    app.include_router(openai.router)
    app.include_router(stored_responses.router)
    app.include_router(admin.router)
    app.include_router(system.router)
    app.add_middleware(RequestIdMiddleware)
    return app


def create_app(settings: GatewaySettings, config: RoutingConfig) -> GatewayApp:
    return GatewayApp(create_api(settings, config))
