"""``/health``, ``/v1/models``, ``/v1/config`` (OVMS model status) and ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from genmesh.protocol import ModelCard, ModelList

from .responding import engine

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    st = engine(request)
    if st.core.alive:
        return JSONResponse({"status": "ok", "model": st.model_name})
    reason = st.core.unavailable_reason()
    return JSONResponse({"status": "unavailable", "reason": reason}, status_code=503)


async def models(request: Request) -> Response:
    st = engine(request)
    cards = ModelList(data=[ModelCard(id=st.model_name, max_model_len=st.source.context_length)])
    return Response(cards.model_dump_json(), media_type="application/json")


for _path in ("/v1/models", "/v3/models", "/v3/v1/models"):
    router.add_api_route(_path, models, methods=["GET"], response_model=None)


@router.get("/v1/config")
async def config(request: Request) -> JSONResponse:
    st = engine(request)
    if st.core.alive:
        state, code, message = "AVAILABLE", "OK", "OK"
    else:
        state, code, message = "UNKNOWN", "UNAVAILABLE", st.core.unavailable_reason()
    status = {"version": "1", "state": state, "status": {"error_code": code, "error_message": message}}
    return JSONResponse({st.model_name: {"model_version_status": [status]}})


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(engine(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)
