"""``POST /v1/embeddings`` (and OVMS's ``/v3/embeddings``), as OpenAI defines it."""

from __future__ import annotations

import base64

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import Embedding, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage, invalid_request
from genmesh.protocol.server.asgi import CheckedRoute

from ..intake import log_user
from .responding import add_api_route, json_reply, registry

router = APIRouter(route_class=CheckedRoute)


def _encoded(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":  # little-endian float32, as OpenAI sends (numpy.frombuffer(..., "<f4"))
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()  # type: ignore[no-any-return]


async def embeddings(body: EmbeddingRequest, request: Request) -> Response:
    models = registry(request)
    model = models.embeddings.serving(body.model, models.chat_names())
    if body.dimensions is not None and body.dimensions != model.checkpoint.dimensions:
        raise invalid_request(
            f"model '{model.name}' does not support 'dimensions' other than {model.checkpoint.dimensions}",
            param="dimensions",
        )
    log_user(body.user, "embeddings", model.name)
    done = await model.embed(body.inputs(), body.truncate_prompt_tokens, body.add_special_tokens)
    data = [Embedding(index=i, embedding=_encoded(v, body.encoding_format)) for i, v in enumerate(done.vectors)]
    usage = EmbeddingUsage(prompt_tokens=done.prompt_tokens, total_tokens=done.prompt_tokens)
    return json_reply(EmbeddingResponse(data=data, model=model.name, usage=usage))


add_api_route(router, "embeddings", embeddings)
