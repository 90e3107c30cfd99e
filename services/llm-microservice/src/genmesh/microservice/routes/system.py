"""Liveness (``/v1/health_check``), readiness (``/v1/ready``), ``/v1/models``, KServe v2 health
(``/v2/health/...``: this hop's own; ``/v2/models/{name}[/ready]``: the engine's, relayed) and ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from .responding import relay_call_unary, state_of

router = APIRouter()

SERVICE_TITLE = "opea_service@llm_genmesh/MicroService"
SERVICE_DESCRIPTION = "OPEA Microservice Infrastructure"


@router.get("/v1/health_check")
async def health_check(request: Request) -> JSONResponse:
    """Liveness: this process answers. The engine is not asked (see ``/v1/ready``)."""
    return JSONResponse(
        {
            "Service Title": SERVICE_TITLE,
            "Service Description": SERVICE_DESCRIPTION,
            "Version": state_of(request).version,
        }
    )


@router.get("/v1/ready")
async def ready(request: Request) -> JSONResponse:
    """Readiness: 200 when the engine's ``/health`` answers 200 (cached ``ready_cache_ttl_s``), else 503."""
    st = state_of(request)
    result = await st.readiness.check()
    if result.ready:
        return JSONResponse(result.body(st.readiness.clock()))
    return JSONResponse(result.body(st.readiness.clock()), status_code=503, headers={"Retry-After": "1"})


@router.get("/v1/models", response_model=None)
@router.get("/v3/models", response_model=None, include_in_schema=False)
@router.get("/v3/v1/models", response_model=None, include_in_schema=False)
async def models(request: Request) -> Response:
    return await relay_call_unary(request, state_of(request).upstream, "GET", "/v1/models")


@router.get("/v2/health/live")
async def v2_live() -> JSONResponse:
    """KServe v2 liveness: this process answers (as ``/v1/health_check``)."""
    return JSONResponse({})


@router.get("/v2/health/ready")
async def v2_ready(request: Request) -> JSONResponse:
    """KServe v2 readiness: the engine serves (as ``/v1/ready``)."""
    st = state_of(request)
    if (await st.readiness.check()).ready:
        return JSONResponse({})
    return JSONResponse({"error": "the engine is not ready"}, status_code=503, headers={"Retry-After": "1"})


@router.get("/v2/models/{name}", response_model=None)
@router.get("/v2/models/{name}/ready", response_model=None)
@router.get("/v2/models/{name}/versions/{version}", response_model=None)
@router.get("/v2/models/{name}/versions/{version}/ready", response_model=None)
async def v2_model(request: Request) -> Response:
    """A model's KServe v2 readiness or metadata: the engine's answer, relayed as it is."""
    return await relay_call_unary(request, state_of(request).upstream, "GET", request.url.path, as_is=True)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(state_of(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)
