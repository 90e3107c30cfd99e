"""OPEA's microservice shapes (``genmesh.protocol.opea``), answered from the engine's OpenAI endpoints:

- ``POST /v1/reranking``: OPEA's reranking microservice. A ``SearchedDoc`` (``initial_query``,
  ``retrieved_docs``, ``top_n``) answers an ``LLMParamsDoc`` (the query and the best ``top_n``
  texts, ready for the LLM); a ``RerankingRequest`` (``input``, ...) a ``RerankingResponse`` (texts
  and scores); a ``ChatCompletionRequest`` (``messages``, ``input``, ``retrieved_docs``) comes back
  with its ``reranked_docs`` and ``documents`` set. Scored by the engine's ``/v1/rerank``.
- ``POST /v1/embeddings`` with ``text`` (OPEA's ``TextDoc``) answers an ``EmbedDoc``; with ``input``
  it is OpenAI's, relayed.
- ``POST /v1/asr``: OPEA's Whisper service, ``{"audio": base64}`` → ``{"asr_result": text}``, by the
  engine's ``/v1/audio/transcriptions``.
- ``POST /v1/tts``: OPEA's SpeechT5 service, ``{"text", "voice"}`` → ``{"tts_result": base64 WAV}``,
  by the engine's ``/v1/audio/speech``.

A bad body is a 400 naming the field; an engine error comes back with the engine's status.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any

import aiohttp
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError

from genmesh.protocol import OpenAIError, from_validation_error, invalid_request
from genmesh.protocol.opea import (
    AsrRequest,
    AsrResponse,
    EmbedDoc,
    LLMParamsDoc,
    RerankingRequest,
    RerankingResponse,
    RerankingResponseData,
    RetrievedDoc,
    SearchedDoc,
    TextDoc,
    TtsRequest,
    TtsResponse,
)

from ..normalise import EMBEDDINGS_PATH, RERANK_PATH
from ..settings import ASR_PATH, TRANSCRIPTIONS_PATH
from .audio import SPEECH_PATH
from .relaying import ALL_ENDPOINTS, relay_body
from .responding import _error_json, deadline_error, json_body, request_id, state_of

router = APIRouter()
RERANKING_PATH = "/v1/reranking"
TTS_PATH = "/v1/tts"
# OPEA's name for "the served voice" (its AudioSpeechRequest's default), and for "detect the language"
DEFAULT_VOICE = "default"
AUTO_LANGUAGE = "auto"


def _parsed(model: type[BaseModel], body: dict[str, Any]) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


class EngineReplyError(Exception):
    """The engine refused: its reply goes back to the client as it is."""

    def __init__(self, response: Response) -> None:
        self.response = response


async def _engine(
    request: Request, path: str, json: dict[str, Any] | None, raw: tuple[bytes, str] | None = None
) -> Any:
    """One engine call within the request deadline: its reply's body (JSON, or bytes when ``raw``
    asks for audio); ``EngineReplyError`` holding the client's answer when the engine refuses."""
    st = state_of(request)
    deadline_s = st.settings.request_timeout_s
    try:
        async with asyncio.timeout(deadline_s):
            reply = await st.upstream.fetch(st.upstream.open("POST", path, request_id(request), json, raw=raw))
    except TimeoutError as exc:
        raise deadline_error("total", deadline_s) from exc
    if reply.status >= 400:
        raise EngineReplyError(_error_json(reply))
    if not reply.headers.get("content-type", "").startswith("application/json"):
        return reply.body
    try:
        return reply.json()
    except ValueError:
        raise OpenAIError("The LLM engine answered broken JSON", status=502, type="upstream_error") from None


async def _ranked(request: Request, query: str, texts: list[str], top_n: int) -> list[RerankingResponseData]:
    """The best ``top_n`` of ``texts`` for ``query``, best first, scored by the engine's rerank."""
    if not texts:
        return []
    body = {"query": query, "documents": texts, "top_n": top_n, "return_documents": False}
    results = (await _engine(request, RERANK_PATH, body))["results"]
    return [RerankingResponseData(text=texts[r["index"]], score=r["relevance_score"]) for r in results]


async def reranking(request: Request) -> Response:
    body = await json_body(request)
    try:
        if "initial_query" in body:
            searched: SearchedDoc = _parsed(SearchedDoc, body)
            ranked = await _ranked(request, searched.initial_query, searched.texts(), searched.top_n)
            doc = LLMParamsDoc(query=searched.initial_query, documents=[r.text for r in ranked])
            return JSONResponse(doc.model_dump(mode="json"))
        if "messages" in body:
            return JSONResponse(await _rerank_chat(request, body))
        req: RerankingRequest = _parsed(RerankingRequest, body)
        ranked = await _ranked(request, req.input, req.texts(), req.top_n)
        return JSONResponse(RerankingResponse(reranked_docs=ranked).model_dump(mode="json"))
    except EngineReplyError as refused:
        return refused.response


async def _rerank_chat(request: Request, body: dict[str, Any]) -> dict[str, Any]:
    """OPEA's ChatCompletionRequest through its reranker: ``input`` (else string ``messages``) is the
    query; the request comes back with ``reranked_docs`` and ``documents`` set."""
    query = body.get("input", body["messages"])
    if not isinstance(query, str) or not query.strip():
        raise invalid_request("'input' (the query) must be a non-empty string", param="input")
    docs = body.get("retrieved_docs", [])
    if not isinstance(docs, list):
        raise invalid_request("'retrieved_docs' must be a list of objects with 'text'", param="retrieved_docs")
    texts = [_parsed(RetrievedDoc, d).text if isinstance(d, dict) else d for d in docs]
    if not all(isinstance(t, str) for t in texts):
        raise invalid_request("'retrieved_docs' must be a list of objects with 'text'", param="retrieved_docs")
    top_n = body.get("top_n", 1)
    if not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1:
        raise invalid_request("'top_n' must be a positive integer", param="top_n")
    ranked = await _ranked(request, query, texts, top_n)
    return {**body, "reranked_docs": [r.model_dump() for r in ranked], "documents": [r.text for r in ranked]}


_relay_embeddings = ALL_ENDPOINTS[EMBEDDINGS_PATH][1]


async def embeddings(request: Request) -> Response:
    body = await json_body(request)
    if "input" in body or "text" not in body:
        return await relay_body(request, body, _relay_embeddings)
    doc: TextDoc = _parsed(TextDoc, body)
    texts = [doc.text] if isinstance(doc.text, str) else doc.text
    if not texts or not all(t.strip() for t in texts):
        raise invalid_request("'text' must not be empty", param="text")
    try:
        reply = await _engine(request, EMBEDDINGS_PATH, {"input": texts})
    except EngineReplyError as refused:
        return refused.response
    vectors = [d["embedding"] for d in sorted(reply["data"], key=lambda d: d["index"])]
    # The retriever's parameters the request gave (OPEA's EmbedDoc carries them on), else OPEA's defaults.
    passed = {k: v for k, v in body.items() if k in EmbedDoc.model_fields and k not in ("text", "embedding")}
    embedding = vectors[0] if isinstance(doc.text, str) else vectors
    out = _parsed(EmbedDoc, {**passed, "text": doc.text, "embedding": embedding})
    return JSONResponse(out.model_dump(mode="json"))


async def asr(request: Request) -> Response:
    req: AsrRequest = _parsed(AsrRequest, await json_body(request))
    try:
        audio = base64.b64decode(req.audio, validate=True)
    except (binascii.Error, ValueError):
        raise invalid_request("'audio' must be base64", param="audio") from None
    form = aiohttp.FormData()
    form.add_field("file", audio, filename="audio", content_type="application/octet-stream")
    form.add_field("response_format", "json")
    if req.language and req.language.lower() != AUTO_LANGUAGE:
        form.add_field("language", req.language)
    writer = form()
    raw = (await writer.as_bytes(), writer.content_type)
    try:
        reply = await _engine(request, TRANSCRIPTIONS_PATH, None, raw)
    except EngineReplyError as refused:
        return refused.response
    return JSONResponse(AsrResponse(asr_result=reply["text"]).model_dump())


async def tts(request: Request) -> Response:
    req: TtsRequest = _parsed(TtsRequest, await json_body(request))
    body: dict[str, Any] = {"input": req.text, "response_format": "wav"}
    if req.voice is not None and req.voice != DEFAULT_VOICE:
        body["voice"] = req.voice
    try:
        wav = await _engine(request, SPEECH_PATH, body)
    except EngineReplyError as refused:
        return refused.response
    if not isinstance(wav, bytes):
        raise OpenAIError("The speech engine answered JSON, not audio", status=502, type="upstream_error")
    return JSONResponse(TtsResponse(tts_result=base64.b64encode(wav).decode()).model_dump())


router.add_api_route(RERANKING_PATH, reranking, methods=["POST"], response_model=None, include_in_schema=False)
router.add_api_route(EMBEDDINGS_PATH, embeddings, methods=["POST"], response_model=None, include_in_schema=False)
router.add_api_route(ASR_PATH, asr, methods=["POST"], response_model=None, include_in_schema=False)
router.add_api_route(TTS_PATH, tts, methods=["POST"], response_model=None, include_in_schema=False)
