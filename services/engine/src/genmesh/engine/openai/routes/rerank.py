"""Rerank (``/v1/rerank``, ``/v2/rerank``, OVMS's ``/v3/rerank`` and the paths the cohere clients
call: ``RERANK_PATHS``) and vLLM's ``/score`` (``SCORE_PATHS``), on a cross-encoder or, by the
cosine of the two vectors, an embedding model (``meta.scoring`` says which)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import (
    RERANK_PATHS,
    SCORE_PATHS,
    OpenAIError,
    RerankDocument,
    RerankRequest,
    RerankResponse,
    RerankResult,
    ScoreData,
    ScoreRequest,
    ScoreResponse,
    Scoring,
    invalid_request,
)
from genmesh.protocol.embeddings import EmbeddingUsage
from genmesh.protocol.rerank import RerankBilledUnits, RerankMeta, RerankTokens
from genmesh.protocol.server.asgi import CheckedRoute, unless_disconnected
from genmesh.protocol.tei import is_tei_rerank

from ...embeddings.cross_encoder import CrossEncoderModel
from ...embeddings.model import EmbeddingModel, Scored
from ..intake import log_user
from . import tei
from .responding import registry

router = APIRouter(route_class=CheckedRoute)
# a rerank path: TEI's body (``texts``) is served as TEI's ``/rerank`` (``tei.rerank``), any other as
# Cohere's or Jina's (``documents``), with the documented ``RerankRequest``
rerank_router = APIRouter(route_class=tei.tei_body_or(b'"texts"', is_tei_rerank, tei.rerank))


def _scorer(request: Request, model: str | None, pairs: int, param: str) -> EmbeddingModel | CrossEncoderModel:
    models = registry(request)
    found = models.embeddings.scorer(model, models.chat_names())
    if pairs > found.options.max_documents:
        raise invalid_request(
            f"{param} holds {pairs} items, more than the limit of {found.options.max_documents}", param=param
        )
    return found


def _scoring(model: EmbeddingModel | CrossEncoderModel) -> Scoring:
    return "cross_encoder" if isinstance(model, CrossEncoderModel) else "embedding_cosine"


async def _score(
    request: Request, model: EmbeddingModel | CrossEncoderModel, queries: list[str], docs: list[str], cut: int | None
) -> Scored:
    return await unless_disconnected(request, model.score(queries, docs, cut))


async def rerank(body: RerankRequest, request: Request) -> Response:
    docs = body.texts()
    model = _scorer(request, body.model, len(docs), "documents")
    log_user(body.user, "rerank", model.name)
    cut = body.max_tokens_per_doc if body.max_tokens_per_doc is not None else body.truncate_prompt_tokens
    try:
        done = await _score(request, model, [body.query] * len(docs), docs, cut)
    except OpenAIError as err:
        if err.param == "truncate_prompt_tokens" and body.max_tokens_per_doc is not None:
            err.param = "max_tokens_per_doc"
            err.message = err.message.replace("truncate_prompt_tokens", "max_tokens_per_doc")
        raise
    order = sorted(range(len(docs)), key=lambda i: (-done.scores[i], i))[: body.top_n]
    results = [
        RerankResult(
            index=i,
            relevance_score=done.scores[i],
            document=RerankDocument(text=docs[i]) if body.return_documents else None,
        )
        for i in order
    ]
    tokens = done.prompt_tokens
    meta = RerankMeta(
        billed_units=RerankBilledUnits(input_tokens=tokens),
        tokens=RerankTokens(input_tokens=tokens),
        scoring=_scoring(model),
    )
    reply = RerankResponse(
        model=model.name, results=results, meta=meta, usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens)
    )
    return Response(reply.model_dump_json(exclude_none=True), media_type="application/json")


async def score(body: ScoreRequest, request: Request) -> Response:
    try:
        queries, docs = body.pairs()
    except ValueError as exc:
        raise invalid_request(str(exc), param="text_2") from exc
    model = _scorer(request, body.model, len(docs), "text_2")
    log_user(body.user, "score", model.name)
    try:
        done = await _score(request, model, queries, docs, body.truncate_prompt_tokens)
    except OpenAIError as err:  # the rerank names of the two sides, as /score names them
        if err.param in ("query", "documents"):
            err.param = "text_1" if err.param == "query" else "text_2"
            err.message = err.message.replace("documents[", "text_2[").replace("the query", "text_1")
        raise
    tokens = done.prompt_tokens
    reply = ScoreResponse(
        model=model.name,
        data=[ScoreData(index=i, score=s) for i, s in enumerate(done.scores)],
        usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens),
        scoring=_scoring(model),
    )
    return Response(reply.model_dump_json(), media_type="application/json")


# documented once each (the other paths take the same body)
for _path in RERANK_PATHS:
    rerank_router.add_api_route(
        _path, rerank, methods=["POST"], response_model=None, include_in_schema=_path == "/v1/rerank"
    )
for _path in SCORE_PATHS:
    router.add_api_route(_path, score, methods=["POST"], response_model=None, include_in_schema=_path == "/v1/score")
