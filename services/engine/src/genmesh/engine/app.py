"""The engine's ASGI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from genmesh.protocol.asgi import RequestIdMiddleware, install_error_handlers

from .model_source import ModelSource
from .routes import chat, completions, system
from .settings import EngineSettings
from .state import EngineState


def create_app(settings: EngineSettings, source: ModelSource) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = await EngineState.start(settings, source)
        app.state.engine = state
        try:
            yield
        finally:
            await state.close()

    app = FastAPI(title="genmesh engine", version="0.1.0", lifespan=lifespan)
    install_error_handlers(app)

    app.include_router(chat.router)
    app.include_router(completions.router)
    app.include_router(system.router)
    app.add_middleware(RequestIdMiddleware)
    return app
