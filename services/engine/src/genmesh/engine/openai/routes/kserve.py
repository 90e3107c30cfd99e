"""KServe v2 health and model metadata, as OpenVINO Model Server serves them (its ``/v2/...`` REST API).

``GET /v2/health/live``: the process lives (``/health/live``). ``GET /v2/health/ready``: the server
serves (``/health``: a servable that failed to load is skipped). ``GET /v2/models/{name}/ready``: 200
when that model serves, 503 (with ``Retry-After`` and the reason) when it does not: the same state
``/v1/models`` and ``/v1/config`` show. ``GET /v2/models/{name}``: its metadata. Errors are KServe's
``{"error": message}``; an unknown model is a 404. The optional ``/versions/{version}`` segment names
version 1, the only one the engine serves.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..model_status import Servable
from .responding import registry
from .system import health, live

router = APIRouter()
VERSION = "1"
PLATFORM = "OpenVINO"


@router.get("/v2/health/live")
async def v2_live(request: Request) -> JSONResponse:
    reply = await live(request)
    return JSONResponse({}, status_code=reply.status_code)


@router.get("/v2/health/ready")
async def v2_ready(request: Request) -> JSONResponse:
    reply = await health(request)
    if reply.status_code == 200:
        return JSONResponse({})
    return JSONResponse({"error": "the server is not ready"}, status_code=503, headers={"Retry-After": "1"})


def _find(request: Request, name: str, version: str) -> Servable | JSONResponse:
    found = registry(request).servable(name)
    if found is None:
        return JSONResponse({"error": f"Model with requested name is not found: {name}"}, status_code=404)
    if version != VERSION:
        return JSONResponse({"error": f"Model with requested version is not found: {name} {version}"}, status_code=404)
    return found


@router.get("/v2/models/{name}/ready")
@router.get("/v2/models/{name}/versions/{version}/ready")
async def model_ready(request: Request, name: str, version: str = VERSION) -> Response:
    found = _find(request, name, version)
    if isinstance(found, JSONResponse):
        return found
    status = found.status
    if status.available:
        return Response(status_code=200)
    body = {"error": f"model '{found.name}' is not available: {status.reason}", "state": status.shown_state}
    return JSONResponse(body, status_code=503, headers={"Retry-After": str(status.retry_after_s)})


@router.get("/v2/models/{name}")
@router.get("/v2/models/{name}/versions/{version}")
async def model_metadata(request: Request, name: str, version: str = VERSION) -> JSONResponse:
    found = _find(request, name, version)
    if isinstance(found, JSONResponse):
        return found
    # KServe v2 model metadata: a generative servable has no fixed tensors, so inputs and outputs are empty
    return JSONResponse({"name": found.name, "versions": [VERSION], "platform": PLATFORM, "inputs": [], "outputs": []})
