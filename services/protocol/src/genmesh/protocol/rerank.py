"""Rerank and score: the bodies of ``/v1/rerank`` (Cohere v1 and Jina, OVMS's ``/v3/rerank``),
``/v2/rerank`` (Cohere v2, what ``cohere.ClientV2`` sends) and vLLM's ``/score``.

A rerank request is a query and documents (strings, or Cohere's objects with ``text``); the reply
is Cohere's: ``results`` sorted by ``relevance_score``, best first, each with the document's
``index`` (and the document, unless ``return_documents`` is false), and ``meta`` with the tokens
counted and how the scores were made (``scoring``). ``usage`` is OpenAI's, so every hop meters a
rerank as it meters embeddings."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .common import INT32_MAX, StrictRequest, new_id, now
from .embeddings import EmbeddingUsage

# Where rerank is served at every hop: Jina's and vLLM's /rerank, /v1/rerank and /v2/rerank, OVMS's
# /v3/rerank, and what the cohere clients call under a base_url ending in /v1 or /v3 (ClientV2 appends
# "v2/rerank", Client "v1/rerank"). vLLM's /score, and its /v1 and /v3 forms.
RERANK_PATHS = (
    "/rerank",
    "/v1/rerank",
    "/v2/rerank",
    "/v3/rerank",
    "/v1/v1/rerank",
    "/v1/v2/rerank",
    "/v3/v1/rerank",
    "/v3/v2/rerank",
)
SCORE_PATHS = ("/score", "/v1/score", "/v3/score")

# How a model scored the pairs: a cross-encoder's sigmoid of its logit, or the cosine of the two
# normalised vectors of an embedding model (vLLM's rule for an embedding model asked to score).
Scoring = Literal["cross_encoder", "embedding_cosine"]


class RerankDocument(BaseModel):
    """Cohere's document object: its ``text`` is what is ranked (other fields are kept, unread)."""

    model_config = ConfigDict(extra="allow")
    text: str


class RerankRequest(StrictRequest):
    model: str | None = None
    query: Annotated[str, Field(min_length=1)]
    documents: list[str | RerankDocument]
    top_n: Annotated[int, Field(le=INT32_MAX)] | None = None
    return_documents: bool = True
    # Cohere v1 (rank_fields: only "text"; max_chunks_per_doc: accepted, the model's chunking rules),
    # Cohere v2 (max_tokens_per_doc: cut each document to that many tokens; priority: accepted),
    # vLLM (truncate_prompt_tokens: as /v1/embeddings, applied to each document)
    rank_fields: list[str] | None = None
    max_chunks_per_doc: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    max_tokens_per_doc: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    priority: int | None = None
    truncate_prompt_tokens: Annotated[int, Field(ge=-1, le=INT32_MAX)] | None = None
    user: str | None = None

    @field_validator("documents")
    @classmethod
    def _not_empty(cls, value: list[str | RerankDocument]) -> list[str | RerankDocument]:
        if not value:
            raise ValueError("documents must not be empty")
        return value

    @field_validator("top_n")
    @classmethod
    def _positive(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError("top_n must be at least 1")
        return value

    @field_validator("rank_fields")
    @classmethod
    def _text_only(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and value != ["text"]:
            raise ValueError("rank_fields other than ['text'] are not supported")
        return value

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]


class RerankResult(BaseModel):
    index: int
    relevance_score: float
    document: RerankDocument | None = None


class RerankTokens(BaseModel):
    input_tokens: int
    output_tokens: int = 0


class RerankBilledUnits(BaseModel):
    search_units: int = 1
    input_tokens: int = 0


class RerankApiVersion(BaseModel):
    version: str = "2"


class RerankMeta(BaseModel):
    api_version: RerankApiVersion = Field(default_factory=RerankApiVersion)
    billed_units: RerankBilledUnits
    tokens: RerankTokens
    scoring: Scoring


class RerankResponse(BaseModel):
    id: str = Field(default_factory=lambda: new_id("rerank"))
    model: str
    results: list[RerankResult]
    meta: RerankMeta
    usage: EmbeddingUsage


class ScoreRequest(StrictRequest):
    """vLLM's ``/score``: ``text_1`` against ``text_2``, one to one (equal lists), or one to many
    (``text_1`` one text)."""

    model: str | None = None
    text_1: str | list[str]
    text_2: str | list[str]
    truncate_prompt_tokens: Annotated[int, Field(ge=-1, le=INT32_MAX)] | None = None
    user: str | None = None

    @field_validator("text_1", "text_2")
    @classmethod
    def _not_empty(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("must not be empty")
        return value

    def pairs(self) -> tuple[list[str], list[str]]:
        """``(queries, documents)`` of equal length; 400 naming ``text_2`` when they cannot pair."""
        first = [self.text_1] if isinstance(self.text_1, str) else self.text_1
        second = [self.text_2] if isinstance(self.text_2, str) else self.text_2
        if len(first) == 1:
            return first * len(second), second
        if len(first) != len(second):
            raise ValueError(
                f"text_1 holds {len(first)} texts and text_2 {len(second)}: send one text_1, or as many as text_2"
            )
        return first, second


class ScoreData(BaseModel):
    index: int
    object: Literal["score"] = "score"
    score: float


class ScoreResponse(BaseModel):
    id: str = Field(default_factory=lambda: new_id("score"))
    object: Literal["list"] = "list"
    created: int = Field(default_factory=now)
    model: str
    data: list[ScoreData]
    usage: EmbeddingUsage
    scoring: Scoring
