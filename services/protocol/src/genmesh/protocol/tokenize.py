"""``/tokenize`` and ``/detokenize``: vLLM's bodies, so that its clients and benchmarks work unchanged."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Discriminator, Field, Tag

from .chat import ChatMessage
from .common import StrictRequest, TokenId


class TokenizeCompletionRequest(StrictRequest):
    """Tokenise a prompt as ``/v1/completions`` would (special tokens added by default)."""

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeChatRequest(StrictRequest):
    """Tokenise messages as ``/v1/chat/completions`` would: through the chat template."""

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    return_token_strs: bool | None = False
    chat_template_kwargs: dict[str, Any] | None = None


def _kind(body: Any) -> str:
    has_messages = "messages" in body if isinstance(body, dict) else isinstance(body, TokenizeChatRequest)
    return "TokenizeChatRequest" if has_messages else "TokenizeCompletionRequest"


# A body with ``messages`` is a chat request, any other a prompt (so errors name the right field).
TokenizeRequest = Annotated[
    Annotated[TokenizeCompletionRequest, Tag("TokenizeCompletionRequest")]
    | Annotated[TokenizeChatRequest, Tag("TokenizeChatRequest")],
    Discriminator(_kind),
]


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(StrictRequest):
    model: str | None = None
    tokens: list[TokenId]


class DetokenizeResponse(BaseModel):
    prompt: str
