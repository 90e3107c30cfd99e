"""The engine's ASGI application."""

from __future__ import annotations

from fastapi import FastAPI

from genmesh.protocol.server.app import package_version, service_app, state_lifespan
from genmesh.protocol.server.asgi import ShutdownSwitch
from genmesh.protocol.tgi import NATIVE_REQUEST_MODELS

from ..models.ovms_config import Repository
from ..settings import EngineSettings
from .audio_models import AudioModels
from .registry import ModelRegistry
from .routes import (
    chat,
    completions,
    embeddings,
    kserve,
    native,
    rerank,
    responses,
    speech,
    system,
    tei,
    tgi,
    tokenize,
    transcriptions,
)


def create_app(settings: EngineSettings, repository: Repository, switch: ShutdownSwitch | None = None) -> FastAPI:
    """One model (``--model``): the server starts answering once it and its extras (embedding, rerank
    and audio models) have loaded or failed; only the chat model's failure stops the server. A model
    repository (``--config-path``): the server answers at once, the models load concurrently, and each
    one's state shows in ``/v1/config``.
    ``switch`` stops the server when a model's engine core keeps dying."""

    async def start() -> ModelRegistry:
        models = ModelRegistry(
            repository, switch.stop if switch is not None else None, AudioModels(settings, repository.audio)
        )
        try:
            await models.start(wait=repository.config_path is None)
        except BaseException:
            await models.close()
            raise
        return models

    engine_version = package_version("genmesh-engine", "unknown")
    app = service_app(
        "genmesh engine",
        engine_version,
        settings.http_limits(),
        state_lifespan("registry", start),
        [
            chat.router,
            completions.router,
            responses.router,
            tokenize.router,
            tokenize.tokenize_router,
            system.router,
            kserve.router,
            embeddings.router,
            rerank.router,
            rerank.rerank_router,
            tei.router,
            tgi.router,
            native.router,
            transcriptions.router,
            speech.router,
        ],
        NATIVE_REQUEST_MODELS,
    )
    app.state.versions = {"version": engine_version, "openvino_genai": package_version("openvino-genai", "unknown")}
    return app
