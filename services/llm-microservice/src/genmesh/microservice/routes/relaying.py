"""``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``, rerank and score: the body
normalised, then relayed. Each is served at OVMS's ``/v3`` and ``/v3/v1`` aliases too (``aliases``);
rerank at every path the engine serves it (``RERANK_PATHS``: Cohere v1/v2, Jina, vLLM, OVMS).

Chat takes OPEA input too (``messages`` as a string or a list); completions pass through. In both
``model`` defaults to ``LLM_MODEL_ID``. ``/v1/responses`` (``responses.py``) relays the same way
but ends a broken stream in its own format.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import RERANK_PATHS, SCORE_PATHS
from genmesh.protocol.server.tracing import annotate, request_attributes, span, tracing

from ..normalise import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    EMBEDDINGS_PATH,
    EngineCall,
    NormaliseBody,
    normalise_chat,
    normalise_completion,
    normalise_embeddings,
    normalise_rerank,
    normalise_score,
)
from ..settings import MicroserviceSettings
from .responding import json_body, relay_call, state_of

Normalise = Callable[[dict[str, Any], MicroserviceSettings], EngineCall]


def _model_only(normalise: NormaliseBody) -> Normalise:
    """A normaliser that needs only the default model (``LLM_MODEL_ID``)."""

    def call(body: dict[str, Any], settings: MicroserviceSettings) -> EngineCall:
        return normalise(body, settings.llm_model_id)

    return call


def _chat(body: dict[str, Any], settings: MicroserviceSettings) -> EngineCall:
    return normalise_chat(body, settings.llm_model_id, settings.default_max_tokens or None)


# Each path, the name of its endpoint, and how its body becomes the engine's call.
ENDPOINTS: dict[str, tuple[str, Normalise]] = {
    CHAT_PATH: ("chat_completions", _chat),
    COMPLETIONS_PATH: ("completions", _model_only(normalise_completion)),
    EMBEDDINGS_PATH: ("embeddings", _model_only(normalise_embeddings)),
}
# OVMS's prefixes of OpenAI's /v1 paths, served by the engine and so at every hop
OVMS_PREFIXES = ("/v3", "/v3/v1")


def aliases(path: str) -> list[str]:
    """``/v1/x`` and its OVMS aliases ``/v3/x`` and ``/v3/v1/x``."""
    tail = path.removeprefix("/v1")
    return [path, *(prefix + tail for prefix in OVMS_PREFIXES)]


ALL_ENDPOINTS: dict[str, tuple[str, Normalise]] = {
    alias: (name if alias == path else f"{name}{alias.replace('/', '_')}", normalise)
    for path, (name, normalise) in ENDPOINTS.items()
    for alias in aliases(path)
}
ALL_ENDPOINTS |= {p: ("rerank" + p.replace("/", "_"), _model_only(normalise_rerank)) for p in RERANK_PATHS}
ALL_ENDPOINTS |= {p: ("score" + p.replace("/", "_"), _model_only(normalise_score)) for p in SCORE_PATHS}

router = APIRouter()


def relaying(normalise: Normalise) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint that relays the body as ``normalise`` makes it."""

    async def endpoint(request: Request) -> Response:
        return await relay_body(request, await json_body(request), normalise)

    return endpoint


async def relay_body(request: Request, body: dict[str, Any], normalise: Normalise) -> Response:
    """``body`` normalised, then relayed."""
    with span("microservice.normalise"):
        call = normalise(body, state_of(request).settings)
    if tracing().enabled:
        annotate(request_attributes(request.url.path, call.body))
    return await relay_call(request, call)


for _path, (_name, _normalise) in ALL_ENDPOINTS.items():
    router.add_api_route(
        _path, relaying(_normalise), methods=["POST"], name=_name, response_model=None, include_in_schema=False
    )
