"""Text Embeddings Inference's ``POST /embed`` and ``POST /rerank`` (TEI's body: ``query`` and
``texts``), on the same embedding and rerank models and batchers as ``/v1/embeddings`` and
``/v1/rerank``: the same text gives the same vector, the same pair the same score.

TEI's statuses (``native_errors.TEI_STATUS``): an empty input or ``texts`` is a 400 ``empty``; more
inputs than the model takes, or an input past its maximum without ``truncate``, a 422 ``validation``."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from genmesh.protocol import OpenAIError
from genmesh.protocol.native_errors import native_validation_error, tei_error
from genmesh.protocol.server.asgi import CheckedRoute, body_limits, unless_disconnected
from genmesh.protocol.server.inputs import decode_json_object
from genmesh.protocol.server.native_route import NativeRoute, native_body, native_response
from genmesh.protocol.tei import (
    TEI_DECODE_PATH,
    TEI_EMBED_ALL_PATH,
    TEI_EMBED_PATH,
    TEI_PREDICT_PATH,
    TEI_SIMILARITY_PATH,
    TEI_SPARSE_PATH,
    UNSUPPORTED_PATHS,
    TeiDecodeRequest,
    TeiEmbedRequest,
    TeiRank,
    TeiRerankRequest,
    TeiSimilarityRequest,
    TeiToken,
    TeiTokenizeRequest,
)

from ...embeddings.cross_encoder import CrossEncoderModel
from ...embeddings.model import EmbeddingModel
from .responding import registry

router = APIRouter(route_class=NativeRoute)
NativeHandler = Callable[[Request, Any], Coroutine[Any, Any, Response]]


def tei_body_or(marker: bytes, is_tei: Callable[[Any], bool], handler: NativeHandler) -> type[CheckedRoute]:
    """The route class of a path TEI shares with another API: a body in TEI's shape (``is_tei``;
    ``marker``: bytes it must hold, a cheap first test) goes to TEI's ``handler``, any other to the
    path's own endpoint."""

    class Either(CheckedRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            other = super().get_route_handler()

            async def either(request: Request) -> Response:
                raw = await request.body()
                if raw and marker in raw:
                    limits = body_limits(request)
                    body = decode_json_object(raw, limits.max_json_depth, limits.max_json_containers)
                    if is_tei(body):
                        return await handler(request, body)
                return await other(request)

            return either

    return Either


def _too_long(err: OpenAIError) -> OpenAIError:
    """The engine's 400 for an input past the model's maximum, as TEI's validation error."""
    if err.code == "context_length_exceeded":
        return tei_error(err.message, "validation")
    return err


async def _encoded(model: EmbeddingModel, body: TeiEmbedRequest) -> list[list[int]]:
    inputs = body.texts()
    if not inputs or any(not item for item in inputs):
        raise tei_error("Input validation error: `inputs` cannot be empty", "empty")
    if len(inputs) > model.options.max_inputs:
        raise tei_error(
            f"batch size {len(inputs)} > maximum allowed batch size {model.options.max_inputs}", "validation"
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
                raise tei_error(
                    f"Input validation error: `inputs` must have less than {limit} tokens. Given: {len(seq)}",
                    "validation",
                )
        return ids
    return model.tokenizer.fit(ids, -1, True, body.truncation_direction.lower() == "left")


def _embedder(request: Request, prompt_name: str | None) -> EmbeddingModel:
    models = registry(request)
    model = models.embeddings.serving(None, list(models.models))
    if prompt_name is not None:
        raise tei_error("`prompt_name` cannot be set: the model has no prompts", "validation")
    return model


async def embed(request: Request) -> Response:
    body = TeiEmbedRequest.model_validate(await native_body(request))
    model = _embedder(request, body.prompt_name)
    if body.dimensions is not None and body.dimensions != model.checkpoint.dimensions:
        raise tei_error(f"`dimensions` must be {model.checkpoint.dimensions} for this model", "validation")
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


async def tokenize(request: Request, raw: Any) -> Response:
    """TEI's ``/tokenize`` on the embedding model's tokenizer (``routes/tokenize.py`` tells TEI's body
    from vLLM's): each input's tokens, with byte offsets."""
    try:
        body = TeiTokenizeRequest.model_validate(raw)
        model = _embedder(request, body.prompt_name)
        texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
        _check_batch(texts, model.options.max_inputs, "inputs")
        tokens = await asyncio.to_thread(model.tokenizer.tokens, texts, body.add_special_tokens)
    except OpenAIError as err:
        return native_response(err)
    except ValidationError as exc:
        return native_response(native_validation_error(exc))
    reply = [[TeiToken(**vars(t)).model_dump() for t in seq] for seq in tokens]
    return _json(reply, sum(len(seq) for seq in tokens))


async def decode(request: Request) -> Response:
    """TEI's ``/decode``: each list of ids as text (one list, or a batch of them)."""
    body = TeiDecodeRequest.model_validate(await native_body(request))
    model = _embedder(request, None)
    ids = body.ids
    batch: list[list[int]] = [ids] if not ids or isinstance(ids[0], int) else ids  # type: ignore[list-item]
    _check_batch(batch, model.options.max_inputs, "ids")
    model.tokenizer.check_ids(batch)
    texts = await asyncio.to_thread(model.tokenizer.decode, batch, body.skip_special_tokens)
    return _json(texts, sum(len(seq) for seq in batch))


def _check_batch(batch: list[Any], most: int, field: str) -> None:
    if not batch:
        raise tei_error(f"`{field}` cannot be empty", "empty")
    if len(batch) > most:
        raise tei_error(f"batch size {len(batch)} > maximum allowed batch size {most}", "validation")


async def rerank(request: Request, raw: Any) -> Response:
    """TEI's ``/rerank``, at every rerank path (``routes/rerank.py`` tells TEI's body apart)."""
    try:
        body = TeiRerankRequest.model_validate(raw)
        if not body.texts:
            raise tei_error("`texts` cannot be empty", "empty")
        models = registry(request)
        model = models.embeddings.scorer(None, list(models.models))
        if len(body.texts) > model.options.max_documents:
            raise tei_error(
                f"batch size {len(body.texts)} > maximum allowed batch size {model.options.max_documents}",
                "validation",
            )
        if not body.query or any(not t for t in body.texts):
            raise tei_error("Input validation error: `inputs` cannot be empty", "empty")
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


# What TEI answers a model without the step each needs: the mesh serves no SPLADE or classifier model,
# and its embedding graphs pool inside (no token embeddings come out of them)
_UNSUPPORTED = {
    TEI_SPARSE_PATH: "Model is not an embedding model with SPLADE pooling",
    TEI_PREDICT_PATH: "Model is not a classifier model (rank pairs with /rerank)",
    TEI_EMBED_ALL_PATH: "`embed_all` is not available for this model: it pools inside its graph",
}


async def unsupported(request: Request) -> Response:
    """TEI's ``/embed_sparse``, ``/predict`` and ``/embed_all``: its 424 ``backend`` for a model
    that does not support them (after the body is read as TEI reads it: not JSON is a 400)."""
    await native_body(request)
    models = registry(request)
    models.embeddings.scorer(None, list(models.models))  # none served: the engine's 404
    raise tei_error(_UNSUPPORTED[request.url.path], "backend")


for _path in UNSUPPORTED_PATHS:
    router.add_api_route(_path, unsupported, methods=["POST"], response_model=None)
router.add_api_route(TEI_EMBED_PATH, embed, methods=["POST"], response_model=None)
router.add_api_route(TEI_DECODE_PATH, decode, methods=["POST"], response_model=None)
router.add_api_route(TEI_SIMILARITY_PATH, similarity, methods=["POST"], response_model=None)
