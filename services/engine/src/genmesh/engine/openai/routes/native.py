"""``GET /info`` and ``POST /``, the two paths that TEI and TGI both claim.

``/info`` is one body with both servers' fields (``NativeInfo``): TGI's describe the chat model
(``model_id``, ``max_input_tokens``, ``max_total_tokens``), TEI's the embedding model, else the
cross-encoder (``model_type``, ``max_input_length``, ``max_client_batch_size``), so each family's
clients find what they read. ``model_id`` names the chat model, or the embedding model when the
engine serves no chat model. ``POST /`` is TGI's when the body has ``parameters`` or ``stream``
(what TGI's clients send), TEI's ``/similarity`` when ``inputs`` is an object
(``InferenceClient.sentence_similarity``), else TEI's ``/embed`` (``feature_extraction``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol.server.native_route import NativeRoute, native_body
from genmesh.protocol.tei import COMPAT_PATH, INFO_PATH, TeiClassifierType, TeiEmbeddingType, is_similarity
from genmesh.protocol.tgi import NativeInfo, is_tgi_request

from ...embeddings.cross_encoder import CrossEncoderModel
from ...embeddings.model import EmbeddingModel
from ..sampling_params import prompt_limit
from . import tei, tgi
from .responding import json_reply, registry

router = APIRouter(route_class=NativeRoute)


async def info(request: Request) -> Response:
    models = registry(request)
    fields: dict[str, object] = {"version": request.app.state.versions["version"], "model_dtype": "float32"}
    loaded = list(models.embeddings.loaded.values())
    embedder = next((m for m in loaded if isinstance(m, EmbeddingModel)), None)
    scorer = embedder or next((m for m in loaded if isinstance(m, CrossEncoderModel)), None)
    if isinstance(scorer, EmbeddingModel):
        fields["model_type"] = {"embedding": TeiEmbeddingType(pooling=str(scorer.checkpoint.pooling))}
        fields["max_input_length"] = scorer.tokenizer.max_length
    elif isinstance(scorer, CrossEncoderModel):
        fields["model_type"] = {"reranker": TeiClassifierType(id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})}
        fields["max_input_length"] = scorer.max_length
    if scorer is not None:
        opts = scorer.options
        fields |= {
            "embedding_model_id": scorer.name,
            "model_id": scorer.name,
            "max_batch_tokens": opts.max_batch_tokens,
            "max_batch_requests": opts.max_batch_size,
            "max_client_batch_size": opts.max_inputs if isinstance(scorer, EmbeddingModel) else opts.max_documents,
            "max_concurrent_requests": opts.max_queued,
            "auto_truncate": opts.truncate,
        }
    chat = next((m for m in models.all() if m.state is not None), None)
    if chat is not None and chat.state is not None:
        st = chat.state
        fields |= {
            "model_id": chat.name,
            "model_pipeline_tag": "text-generation",
            "max_concurrent_requests": st.settings.max_num_seqs,
            "max_input_tokens": prompt_limit(st),
            "max_total_tokens": st.source.context_length,
            "max_stop_sequences": st.settings.tgi_max_stop_sequences,
        }
    fields.setdefault("model_id", next(iter(models.models), "none"))
    fields.setdefault("max_concurrent_requests", 1)
    fields.setdefault("max_client_batch_size", 1)
    return json_reply(NativeInfo.model_validate(fields))


async def compat(request: Request) -> Response:
    body = await native_body(request)
    if is_tgi_request(body):
        return await tgi.compat(request)
    if is_similarity(body):
        return await tei.similarity(request)
    return await tei.embed(request)


router.add_api_route(INFO_PATH, info, methods=["GET"], response_model=None)
router.add_api_route(COMPAT_PATH, compat, methods=["POST"], response_model=None)
