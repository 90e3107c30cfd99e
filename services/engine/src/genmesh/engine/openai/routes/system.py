"""``/health``, ``/v1/models``, ``/v1/config`` (OVMS model status), ``/version`` and ``/metrics``."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from genmesh.protocol import ModelCard, ModelList

from ...embeddings.cross_encoder import CrossEncoderModel
from ...embeddings.model import EmbeddingModel
from ..registry import ModelRegistry
from .responding import add_api_route, json_reply, registry

router = APIRouter()


@router.get("/health")
async def health(request: Request, model: str | None = None) -> JSONResponse:
    """Readiness: 200 when every served model (or the one ``?model=`` names) is AVAILABLE: loaded,
    its engine loop alive. Otherwise 503 with each unavailable model's reason (``restarting``
    while a dead or hung core is being replaced). ``live`` is the process's liveness, as
    ``/health/live`` reports it."""
    models = registry(request)
    embeddings = models.embeddings
    if model is not None and model in embeddings:
        chosen, named = [], [model]
    else:
        chosen = [models.lookup(model)] if model is not None else models.all()
        named = list(embeddings.specs) if model is None else []
    states = {m.name: m.status().state for m in chosen} | {n: embeddings.state(n)[0] for n in named}
    down = {m.name: m.unavailable_reason() for m in chosen if not m.status().available}
    down |= {n: embeddings.state(n)[2] for n in named if n not in embeddings.loaded}
    restarting = [m.name for m in chosen if m.state is not None and m.state.core.restarting]
    status = "ok" if not down else ("restarting" if len(restarting) == len(down) else "unavailable")
    body: dict[str, Any] = {"status": status, "live": _live(models)}
    if len(states) == 1:
        body["model"] = next(iter(states))
    body["models"] = states
    if not down:
        return JSONResponse(body)
    reasons = [f"{name}: {why}" for name, why in down.items()] if len(states) > 1 else list(down.values())
    body["reason"] = "; ".join(reasons)
    return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})


def _live(models: ModelRegistry) -> bool:
    """False once a model's core supervisor gave up: the server is about to exit and be restarted."""
    return not any(m.state is not None and m.state.core.failed is not None for m in models.all())


@router.get("/health/live")
async def live(request: Request) -> JSONResponse:
    """Liveness: 200 while the process serves or heals itself (a core being replaced included);
    503 once it has given up on a model and is exiting."""
    ok = _live(registry(request))
    return JSONResponse({"status": "alive" if ok else "exiting"}, status_code=200 if ok else 503)


async def models(request: Request) -> Response:
    cards = [
        ModelCard(
            id=m.name, max_model_len=m.spec.source.context_length if m.spec.source is not None else None, kind="chat"
        )
        for m in registry(request).all()
    ]
    embeddings = registry(request).embeddings
    for name in embeddings.specs:
        loaded = embeddings.loaded.get(name)
        longest = loaded.max_length if isinstance(loaded, CrossEncoderModel) else None
        if isinstance(loaded, EmbeddingModel):
            longest = loaded.checkpoint.max_length
        kind: Literal["embeddings", "rerank"] = "rerank" if embeddings.kind(name) == "rerank" else "embeddings"
        cards.append(ModelCard(id=name, max_model_len=longest, kind=kind))
    audio = registry(request).audio
    for served in audio.served():
        card = {"id": served.name, "kind": served.kind} | (
            {"voices": audio.voices()} if served.kind == "speech" else {}
        )
        cards.append(ModelCard.model_validate(card))
    return json_reply(ModelList(data=cards))


add_api_route(router, "models", models, "GET")


@router.get("/v1/config")
async def config(request: Request) -> JSONResponse:
    reply: dict[str, Any] = {}
    for m in registry(request).all():
        s = m.status()
        status = {"version": "1", "state": s.state, "status": {"error_code": s.error_code, "error_message": s.message}}
        reply[m.name] = {"model_version_status": [status]}
    embeddings = registry(request).embeddings
    for name in embeddings.specs:
        state, code, message = embeddings.state(name)
        status = {"version": "1", "state": state, "status": {"error_code": code, "error_message": message}}
        reply[name] = {"model_version_status": [status]}
    for served in registry(request).audio.served():
        state, code, message = ("AVAILABLE", "OK", "OK") if served.worker is not None else ("LOADING", "OK", "OK")
        if served.error is not None:
            state, code, message = "LOADING", "FAILED_PRECONDITION", served.error
        status = {"version": "1", "state": state, "status": {"error_code": code, "error_message": message}}
        reply[served.name] = {"model_version_status": [status]}
    return JSONResponse(reply)


@router.get("/version")
async def version(request: Request) -> JSONResponse:
    versions: dict[str, str] = request.app.state.versions
    return JSONResponse(versions)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(registry(request).families.render(), media_type=CONTENT_TYPE_LATEST)
