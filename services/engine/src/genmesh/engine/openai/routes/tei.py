"""Text Embeddings Inference's ``POST /embed`` and ``POST /rerank`` (TEI's body: ``query`` and
``texts``), on the same embedding and rerank models and batchers as ``/v1/embeddings`` and
``/v1/rerank``: the same text gives the same vector, the same pair the same score.

TEI's statuses (``native_errors``): an empty input or ``texts`` is a 400 ``empty``; more inputs than
the model takes, or an input past its maximum without ``truncate``, a 413 ``validation``."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import numpy as np
import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from genmesh.protocol import OpenAIError
from genmesh.protocol.native_errors import native, native_validation_error
from genmesh.protocol.server.asgi import unless_disconnected
from genmesh.protocol.server.native_route import NativeRoute, native_body, native_response
from genmesh.protocol.tei import (
    TEI_EMBED_PATH,
    TEI_SIMILARITY_PATH,
    TeiEmbedRequest,
    TeiRank,
    TeiRerankRequest,
    TeiSimilarityRequest,
)

from ...embeddings.cross_encoder import CrossEncoderModel
from ...embeddings.model import EmbeddingModel
from .responding import registry

router = APIRouter(route_class=NativeRoute)


def _too_long(err: OpenAIError) -> OpenAIError:
    """The engine's 400 for an input past the model's maximum, as TEI's 413."""
    if err.code == "context_length_exceeded":
        return native(err.message, 413, "validation")
    return err


async def _encoded(model: EmbeddingModel, body: TeiEmbedRequest) -> list[list[int]]:
    inputs = body.texts()
    if not inputs or any(not item for item in inputs):
        raise native("Input validation error: `inputs` cannot be empty", 400, "empty")
    if len(inputs) > model.options.max_inputs:
        raise native(
            f"batch size {len(inputs)} > maximum allowed batch size {model.options.max_inputs}", 413, "validation"
        )
    if isinstance(inputs[0], str):
        ids = await asyncio.to_thread(model.tokenizer.encode, inputs, True)
    else:
        ids = [list(seq) for seq in inputs]
    limit = model.tokenizer.max_length
    truncate = body.truncate if body.truncate is not None else model.options.truncate
    if not truncate:
        for seq in ids:
            if len(seq) > limit:
                raise native(
                    f"Input validation error: `inputs` must have less than {limit} tokens. Given: {len(seq)}",
                    413,
                    "validation",
                )
        return ids
    return model.tokenizer.fit(ids, -1, True, body.truncation_direction.lower() == "left")


def _embedder(request: Request, prompt_name: str | None) -> EmbeddingModel:
    models = registry(request)
    model = models.embeddings.serving(None, list(models.models))
    if prompt_name is not None:
        raise native("`prompt_name` cannot be set: the model has no prompts", 413, "validation")
    return model


async def embed(request: Request) -> Response:
    body = TeiEmbedRequest.model_validate(await native_body(request))
    model = _embedder(request, body.prompt_name)
    if body.dimensions is not None and body.dimensions != model.checkpoint.dimensions:
        raise native(f"`dimensions` must be {model.checkpoint.dimensions} for this model", 400, "validation")
    ids = await _encoded(model, body)
    done = await unless_disconnected(request, model.embed(ids, None, True))
    vectors = done.vectors
    if body.normalize:  # idempotent on a model that normalises already
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return _json(vectors.tolist(), done.prompt_tokens)


async def similarity(request: Request) -> Response:
    """The cosine of the source sentence's vector with each sentence's, the vectors as ``/embed`` makes them."""
    body = TeiSimilarityRequest.model_validate(await native_body(request))
    model = _embedder(request, body.prompt_name)
    texts = [body.inputs.source_sentence, *body.inputs.sentences]
    asked = TeiEmbedRequest(inputs=texts, truncate=body.truncate, truncation_direction=body.truncation_direction)
    ids = await _encoded(model, asked)
    done = await unless_disconnected(request, model.embed(ids, None, True))
    v = done.vectors.astype(np.float64)
    v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    return _json((v[1:] @ v[0]).tolist(), done.prompt_tokens)


def _json(value: Any, tokens: int) -> Response:
    # TGI's and TEI's usage headers: what the gateway meters a bare-list reply by
    return Response(orjson.dumps(value), media_type="application/json", headers={"x-compute-tokens": str(tokens)})


def _raw(score: float, model: EmbeddingModel | CrossEncoderModel) -> float:
    """A cross-encoder's logit (its sigmoid inverted); an embedding model's cosine as it is."""
    if not isinstance(model, CrossEncoderModel):
        return score
    s = min(max(score, 1e-12), 1 - 1e-12)
    return math.log(s / (1 - s))


async def rerank(request: Request, raw: Any) -> Response:
    """TEI's ``/rerank``, at every rerank path (``routes/rerank.py`` tells TEI's body apart)."""
    try:
        body = TeiRerankRequest.model_validate(raw)
        if not body.texts:
            raise native("`texts` cannot be empty", 400, "empty")
        models = registry(request)
        model = models.embeddings.scorer(None, list(models.models))
        if len(body.texts) > model.options.max_documents:
            raise native(
                f"batch size {len(body.texts)} > maximum allowed batch size {model.options.max_documents}",
                413,
                "validation",
            )
        if not body.query or any(not t for t in body.texts):
            raise native("Input validation error: `inputs` cannot be empty", 400, "empty")
        truncate = body.truncate if body.truncate is not None else model.options.truncate
        try:
            done = await unless_disconnected(
                request,
                model.score(
                    [body.query] * len(body.texts),
                    body.texts,
                    -1 if truncate else None,
                    body.truncation_direction.lower() == "left",
                ),
            )
        except OpenAIError as err:
            raise _too_long(err) from err
    except OpenAIError as err:
        return native_response(err)
    except ValidationError as exc:
        return native_response(native_validation_error(exc))
    order = sorted(range(len(body.texts)), key=lambda i: (-done.scores[i], i))
    ranks = [
        TeiRank(
            index=i,
            text=body.texts[i] if body.return_text else None,
            score=_raw(done.scores[i], model) if body.raw_scores else done.scores[i],
        ).model_dump(exclude_none=True)
        for i in order
    ]
    return _json(ranks, done.prompt_tokens)


router.add_api_route(TEI_EMBED_PATH, embed, methods=["POST"], response_model=None)
router.add_api_route(TEI_SIMILARITY_PATH, similarity, methods=["POST"], response_model=None)
