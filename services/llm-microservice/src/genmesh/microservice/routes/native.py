"""TEI's and TGI's native API, relayed to the engine as sent (the engine checks it): ``/embed``,
``/similarity``, ``/tokenize``, ``/decode``, ``/generate``, ``/generate_stream``, ``POST /``, ``GET /info``
and TEI's routes the engine refuses (``/embed_sparse``, ``/predict``, ``/embed_all``); TEI's ``/rerank`` body comes
through ``relaying.py`` (``normalise_rerank`` lets it by). Errors, the engine's and this hop's own,
are TEI's and TGI's ``{"error", "error_type"}`` (``NativeRoute``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol.server.native_route import NativeRoute
from genmesh.protocol.tei import (
    COMPAT_PATH,
    INFO_PATH,
    TEI_DECODE_PATH,
    TEI_EMBED_PATH,
    TEI_SIMILARITY_PATH,
    TEI_TOKENIZE_PATH,
    UNSUPPORTED_PATHS,
)
from genmesh.protocol.tgi import TGI_GENERATE_PATH, TGI_STREAM_PATH, is_tgi_request
from genmesh.relay.native import TgiStreamEnd

from ..normalise import EngineCall
from .responding import json_body, relay_call, relay_call_unary, state_of

router = APIRouter(route_class=NativeRoute)


async def _relay(request: Request, path: str) -> Response:
    body = await json_body(request)
    stream = path == TGI_STREAM_PATH or (path == COMPAT_PATH and is_tgi_request(body) and body.get("stream") is True)
    return await relay_call(request, EngineCall(path, body, stream), TgiStreamEnd() if stream else None)


async def embed(request: Request) -> Response:
    return await _relay(request, TEI_EMBED_PATH)


async def similarity(request: Request) -> Response:
    return await _relay(request, TEI_SIMILARITY_PATH)


async def generate(request: Request) -> Response:
    return await _relay(request, TGI_GENERATE_PATH)


async def generate_stream(request: Request) -> Response:
    return await _relay(request, TGI_STREAM_PATH)


async def compat(request: Request) -> Response:
    return await _relay(request, COMPAT_PATH)


async def as_sent(request: Request) -> Response:
    """TEI's ``/tokenize`` (vLLM's body too: the engine tells them apart) and ``/decode``; its
    ``/embed_sparse``, ``/predict`` and ``/embed_all``, which the engine refuses as TEI does."""
    return await _relay(request, request.url.path)


async def info(request: Request) -> Response:
    return await relay_call_unary(request, state_of(request).upstream, "GET", INFO_PATH)


router.add_api_route(TEI_EMBED_PATH, embed, methods=["POST"], response_model=None)
router.add_api_route(TEI_SIMILARITY_PATH, similarity, methods=["POST"], response_model=None)
router.add_api_route(TGI_GENERATE_PATH, generate, methods=["POST"], response_model=None)
router.add_api_route(TGI_STREAM_PATH, generate_stream, methods=["POST"], response_model=None)
router.add_api_route(COMPAT_PATH, compat, methods=["POST"], response_model=None)
router.add_api_route(INFO_PATH, info, methods=["GET"], response_model=None)
for _path in (TEI_TOKENIZE_PATH, TEI_DECODE_PATH, *UNSUPPORTED_PATHS):
    router.add_api_route(_path, as_sent, methods=["POST"], response_model=None)
