"""``/health``, ``/v1/models``, ``/v1/config`` (OVMS model status), ``/version`` and ``/metrics``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from genmesh.protocol import ModelCard, ModelList, model_not_found

from ..registry import ModelRegistry
from .responding import add_api_route, json_reply, registry

router = APIRouter()


@router.get("/health")
async def health(request: Request, model: str | None = None) -> JSONResponse:
    """Readiness: 200 while the served models serve (or the one ``?model=`` names, of any kind):
    loaded, their engine loops alive. A servable that failed to load is skipped (listed under
    ``failed`` with its reason; ``/v2/models/{name}/ready`` says 503 for it), so a missing voice
    never takes the chat model's readiness. 503 with each unavailable model's reason while one is
    loading or its core is being replaced (``restarting``), or when none serves at all. ``live`` is
    the process's liveness, as ``/health/live`` reports it."""
    models = registry(request)
    if model is not None:
        one = models.servable(model)
        if one is None:
            raise model_not_found(model)
        chosen = [one]
    else:
        chosen = models.servables()
    failed = {s.name: s.status.reason for s in chosen if s.status.failed} if model is None else {}
    down = {s.name: s.status.reason for s in chosen if not s.status.available and s.name not in failed}
    restarting = {m.name for m in models.all() if m.state is not None and m.state.core.restarting}
    if not down and len(failed) == len(chosen):  # nothing serves
        down = failed
    status = "ok" if not down else ("restarting" if set(down) <= restarting else "unavailable")
    body: dict[str, Any] = {"status": status, "live": _live(models)}
    if len(chosen) == 1:
        body["model"] = chosen[0].name
    body["models"] = {s.name: s.status.shown_state for s in chosen}
    if failed:
        body["failed"] = failed
    if not down:
        return JSONResponse(body)
    reasons = [f"{name}: {why}" for name, why in down.items()] if len(chosen) > 1 else list(down.values())
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
    """Every servable of every kind, with its state and, when it does not serve, the reason."""
    reg = registry(request)
    cards = []
    for s in reg.servables():
        card: dict[str, Any] = {"id": s.name, "kind": s.kind, "max_model_len": s.max_model_len}
        if s.kind == "speech":
            card["voices"] = reg.audio.voices()
        card["state"] = s.status.shown_state
        if not s.status.available:
            card["reason"] = s.status.reason
        cards.append(ModelCard.model_validate(card))
    return json_reply(ModelList(data=cards))


add_api_route(router, "models", models, "GET")


@router.get("/v1/config")
async def config(request: Request) -> JSONResponse:
    """OVMS's model status: each servable's version 1, its state and error code and message; a loaded chat
    model also says which path multiplies its Q4_1 matrices and why (``int8_matmul``)."""
    reg = registry(request)
    reply: dict[str, dict[str, Any]] = {
        s.name: {"model_version_status": [s.status.version_status()]} for s in reg.servables()
    }
    for model in reg.models.values():
        if model.state is not None:
            reply[model.name]["int8_matmul"] = model.state.int8.describe()
    return JSONResponse(reply)


@router.get("/version")
async def version(request: Request) -> JSONResponse:
    versions: dict[str, str] = request.app.state.versions
    return JSONResponse(versions)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(registry(request).families.render(), media_type=CONTENT_TYPE_LATEST)
