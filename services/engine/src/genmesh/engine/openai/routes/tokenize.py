"""``POST /tokenize``, ``POST /detokenize`` and ``GET /tokenizer_info`` (vLLM's endpoints and bodies);
TEI's body on ``/tokenize`` (``inputs``) is TEI's ``/tokenize`` (``tei.tokenize``)."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import Response

from genmesh.protocol import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeChatRequest,
    TokenizeRequest,
    TokenizeResponse,
    unsupported_parameter,
)
from genmesh.protocol.server.asgi import CheckedRoute
from genmesh.protocol.tei import TEI_TOKENIZE_PATH, is_tei_tokenize

from . import tei
from .responding import engine, json_reply

router = APIRouter(route_class=CheckedRoute)
tokenize_router = APIRouter(route_class=tei.tei_body_or(b'"inputs"', is_tei_tokenize, tei.tokenize))


@tokenize_router.post(TEI_TOKENIZE_PATH, response_model=None)
async def tokenize(body: TokenizeRequest, request: Request) -> Response:
    st = engine(request, body.model)
    if isinstance(body, TokenizeChatRequest):
        if body.continue_final_message:
            raise unsupported_parameter("continue_final_message")
        prompt = st.tokenizer.chat_prompt(
            body.messages, body.add_generation_prompt, extra_context=body.chat_template_kwargs
        )
    else:
        prompt = body.prompt
    st.tokenizer.check_size(len(prompt), st.source.context_length, "prompt")
    ids = st.tokenizer.encode(prompt, add_special_tokens=body.add_special_tokens) if prompt else []
    strs = [st.tokenizer.token_text(i)[0] for i in ids] if body.return_token_strs else None
    reply = TokenizeResponse(count=len(ids), max_model_len=st.source.context_length, tokens=ids, token_strs=strs)
    return json_reply(reply)


@router.post("/detokenize", response_model=None)
async def detokenize(body: DetokenizeRequest, request: Request) -> Response:
    st = engine(request, body.model)
    st.tokenizer.check_ids(body.tokens, "tokens")
    reply = DetokenizeResponse(prompt=st.tokenizer.detokenize(body.tokens))
    return json_reply(reply)


@router.get("/tokenizer_info", response_model=None)
async def tokenizer_info(request: Request, model: str | None = None) -> Response:
    """vLLM's ``GET /tokenizer_info``: what a client needs to tokenise as the server does (lm-eval's
    ``tokenizer_backend=remote`` reads it, then calls ``/tokenize`` and ``/detokenize``)."""
    st = engine(request, model)
    tok = st.tokenizer
    special = tok.special_tokens()
    info = {
        "tokenizer_class": "openvino_genai.Tokenizer",
        "model_max_length": st.source.context_length,
        "chat_template": tok.chat_template,
        **special,
    }
    return Response(json.dumps(info), media_type="application/json")
