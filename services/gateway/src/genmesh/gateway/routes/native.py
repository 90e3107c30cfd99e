"""TEI's and TGI's native API at the gateway: ``POST /embed``, ``/similarity``, ``/tokenize`` (TEI's
body; vLLM's ``/tokenize`` is the engine's alone), ``/decode``, ``/generate``, ``/generate_stream``
and ``/`` (and TEI's routes the engine refuses) go the hot path (``NativeExchange``), TEI's
``/rerank`` body goes as rerank's others do (``RerankExchange``), and ``GET /info`` (any valid key)
is the chat model's upstream's (the engine's merged TGI and TEI fields), else the first model's.
Refusals on these paths are TEI's and TGI's (``NativeExchange``; ``/info``'s by its path:
``genmesh.protocol.native_errors.NATIVE_PATHS``)."""

from __future__ import annotations

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import service_unavailable
from genmesh.protocol.native_errors import TEI_PATHS
from genmesh.protocol.server.asgi import error_response
from genmesh.protocol.tei import COMPAT_PATH, INFO_PATH, TEI_TOKENIZE_PATH
from genmesh.protocol.tgi import TGI_GENERATE_PATH, TGI_STREAM_PATH

from ..exchange.errors import authenticate
from ..replies import with_retry_after
from .common import gateway

PATHS = frozenset((*TEI_PATHS, TEI_TOKENIZE_PATH, TGI_GENERATE_PATH, TGI_STREAM_PATH, COMPAT_PATH))
INFO_TIMEOUT_S = 10.0
router = APIRouter()


@router.get(INFO_PATH)
async def info(request: Request) -> Response:
    st = gateway(request)
    await authenticate(st, request.headers.get("authorization"))
    routes = sorted(st.config.models.values(), key=lambda r: r.kind != "chat")
    for route in routes:
        for up in st.pool.upstreams(route):
            if not up.available():
                continue
            try:
                async with httpx.AsyncClient(timeout=INFO_TIMEOUT_S) as client:
                    reply = await client.get(up.url + INFO_PATH)
            except httpx.HTTPError:
                continue
            return Response(reply.content, status_code=reply.status_code, media_type="application/json")
    return error_response(with_retry_after(service_unavailable("no upstream answered"), 1), native=True)
