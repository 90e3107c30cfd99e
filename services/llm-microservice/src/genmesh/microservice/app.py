"""The microservice's ASGI application."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.middleware import Middleware

from genmesh.protocol.server.app import package_version, service_app, state_lifespan
from genmesh.protocol.tgi import NATIVE_REQUEST_MODELS

from .metrics import MicroserviceMetrics
from .normalise import REQUEST_MODELS
from .observe import ObserveMiddleware
from .routes import audio, native, opea, relaying, responses, system
from .settings import MicroserviceSettings
from .state import MicroserviceState


def create_app(settings: MicroserviceSettings) -> FastAPI:
    """Build the app; its client to the engine is made when it starts (lifespan) and closed at shutdown."""
    metrics = MicroserviceMetrics()
    app_version = package_version("genmesh-microservice")
    return service_app(
        "genmesh llm-microservice",
        app_version,
        settings.http_limits(),
        state_lifespan("microservice", lambda: MicroserviceState.start(settings, app_version, metrics)),
        [opea.router, relaying.router, responses.router, system.router, audio.router, native.router],
        REQUEST_MODELS | NATIVE_REQUEST_MODELS,
        middleware=[Middleware(ObserveMiddleware, metrics=metrics)],  # the request id is known when it runs
    )
