"""The gateway's ASGI application: the completion endpoints as plain ASGI, the rest on FastAPI."""

from __future__ import annotations

import functools

from fastapi import FastAPI
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from genmesh.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    OpenAIError,
    RerankRequest,
    ResponsesRequest,
    ScoreRequest,
)
from genmesh.protocol.native_errors import refuses_natively
from genmesh.protocol.server.app import service_app, state_lifespan
from genmesh.protocol.server.asgi import error_response
from genmesh.protocol.tgi import NATIVE_REQUEST_MODELS

from .admission.auth import check_admin
from .exchange import responses
from .exchange.errors import authenticate
from .exchange.native import NativeExchange, RerankExchange
from .routes import (
    admin,
    aliases,
    audio,
    batches,
    completions,
    console,
    files,
    native,
    openai,
    stored_responses,
    system,
)
from .routing.config import RoutingConfig
from .runner.batch_runner import BatchRunner
from .settings import GatewaySettings
from .state import GatewayState

# With API keys required, these need a key too: the API's description needs any valid key (or
# the admin key); /metrics, whose series carry tenant names, needs the admin key.
DOC_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
ADMIN_PATHS = frozenset({"/metrics"})


class GatewayApp:
    """Serves each alias path as its ``/v1`` endpoint (``aliases.py``); sends the completion,
    embeddings, rerank (``RerankExchange``: TEI's body too) and score endpoints straight to the hot path, and
    ``GET /console/status`` (polled by every open console) straight to its handler; the rest
    (lifespan included) to ``api``."""

    def __init__(self, api: FastAPI) -> None:
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            tei_path = refuses_natively(scope["path"])  # TEI's /rerank: refusals before the body are TEI's
            scope = aliases.canonical(scope)
            path = scope["path"]
            if path == aliases.RERANK_PATH:
                rerank = functools.partial(RerankExchange, tei_path=tei_path)
                await completions.serve(self.api.state.gateway, scope, receive, send, rerank)
                return
            if path in completions.PATHS:
                await completions.serve(self.api.state.gateway, scope, receive, send)
                return
            if path in audio.PATHS:
                await audio.serve(self.api.state.gateway, scope, receive, send)
                return
            if path == responses.PATH and scope["method"] == "POST":
                await completions.serve(self.api.state.gateway, scope, receive, send, responses.ResponsesExchange)
                return
            if path in native.PATHS and scope["method"] == "POST":
                await completions.serve(self.api.state.gateway, scope, receive, send, NativeExchange)
                return
            if path == console.STATUS_PATH and scope["method"] == "GET":
                await console.serve_status(self.api.state.gateway, scope, receive, send)
                return
            if path in DOC_PATHS or path in ADMIN_PATHS:
                try:
                    await self._authorize(scope)
                except OpenAIError as err:
                    await error_response(err)(scope, receive, send)
                    return
        await self.api(scope, receive, send)

    async def _authorize(self, scope: Scope) -> None:
        st = self.api.state.gateway
        if not st.auth_required:
            return
        authorization = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
        if scope["path"] in ADMIN_PATHS:
            check_admin(authorization, st.admin_key)
            return
        try:
            check_admin(authorization, st.admin_key)
        except OpenAIError:
            await authenticate(st, authorization, required=True)


async def start_gateway(settings: GatewaySettings, config: RoutingConfig) -> GatewayState:
    """The gateway's state, with its batch runner running."""
    st = await GatewayState.start(settings, config)
    st.add_task(BatchRunner(st, st.batches).run_forever())
    return st


def create_api(settings: GatewaySettings, config: RoutingConfig) -> FastAPI:
    # The completion endpoints are served as plain ASGI (GatewayApp), before FastAPI: documented here.
    documented: dict[str, type[BaseModel]] = {
        "/v1/chat/completions": ChatCompletionRequest,
        "/v1/completions": CompletionRequest,
        responses.PATH: ResponsesRequest,
        completions.EMBEDDINGS_PATH: EmbeddingRequest,
        aliases.RERANK_PATH: RerankRequest,
        aliases.SCORE_PATH: ScoreRequest,
        **NATIVE_REQUEST_MODELS,
    }
    return service_app(
        "genmesh gateway",
        "0.1.0",
        settings.http_limits(),
        state_lifespan("gateway", lambda: start_gateway(settings, config)),
        [
            openai.router,
            native.router,
            stored_responses.router,
            files.router,
            batches.router,
            admin.router,
            system.router,
            console.router,
        ],
        documented,
    )


def create_app(settings: GatewaySettings, config: RoutingConfig) -> GatewayApp:
    return GatewayApp(create_api(settings, config))
