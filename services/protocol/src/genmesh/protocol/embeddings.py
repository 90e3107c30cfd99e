"""``/v1/embeddings``: OpenAI's body (``input`` as text, texts, token ids or lists of them), with
vLLM's ``truncate_prompt_tokens`` and ``add_special_tokens``."""

from __future__ import annotations

from typing import Annotated, Literal, cast

from pydantic import BaseModel, Field, field_validator

from .common import StrictRequest, TokenId

EmbeddingInput = str | list[str] | list[TokenId] | list[list[TokenId]]


class EmbeddingRequest(StrictRequest):
    model: str | None = None
    input: EmbeddingInput
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(ge=1)] | None = None
    user: str | None = None
    # vLLM: keep the last k tokens of each input (-1: as many as the model takes); unset: too long is a 400
    truncate_prompt_tokens: Annotated[int, Field(ge=-1)] | None = None
    add_special_tokens: bool = True

    @field_validator("input")
    @classmethod
    def _not_empty(cls, value: EmbeddingInput) -> EmbeddingInput:
        if isinstance(value, str) or not value:
            if not value:
                raise ValueError("input must not be empty")
            return value
        for i, item in enumerate(value):
            if isinstance(item, (str, list)) and not item:
                raise ValueError(f"input[{i}] must not be empty")
        return value

    def inputs(self) -> list[str] | list[list[int]]:
        """The inputs as a list: texts, or token-id lists."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if value and isinstance(value[0], int):
            return [value]  # one list of token ids
        return cast(list[str] | list[list[int]], value)


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # str: base64 of little-endian float32


class EmbeddingUsage(BaseModel):
    prompt_tokens: int = 0
    total_tokens: int = 0


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
