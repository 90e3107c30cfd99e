"""The engine's ASGI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI

from genmesh.protocol.server.asgi import (
    BodyLimitMiddleware,
    RequestIdMiddleware,
    ShutdownSwitch,
    install_error_handlers,
)

from .registry import ModelRegistry
from .repository import Repository
from .routes import chat, completions, responses, system, tokenize
from .settings import EngineSettings


def _version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "unknown"


def create_app(settings: EngineSettings, repository: Repository, switch: ShutdownSwitch | None = None) -> FastAPI:
    """One model (``--model``): the server starts answering once it is loaded, and a load
    failure stops the server. A model repository (``--config-path``): the server answers at
    once, the models load concurrently, and each one's state shows in ``/v1/config``.
    ``switch`` stops the server when a model's engine core keeps dying."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        models = ModelRegistry(repository, switch.stop if switch is not None else None)
        app.state.registry = models
        try:
            await models.start(wait=repository.config_path is None)
            yield
        finally:
            await models.close()

    engine_version = _version("genmesh-engine")
    app = FastAPI(title="genmesh engine", version=engine_version, lifespan=lifespan)
    app.state.versions = {"version": engine_version, "openvino_genai": _version("openvino-genai")}
    app.state.http_limits = settings.http_limits()
    install_error_handlers(app)

    app.include_router(chat.router)
    app.include_router(completions.router)
    app.include_router(responses.router)
    app.include_router(tokenize.router)
    app.include_router(system.router)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestIdMiddleware)
    return app
