"""Text Embeddings Inference's native API (huggingface/text-embeddings-inference): ``POST /embed``,
``POST /rerank`` with TEI's body, and the fields of ``GET /info`` that describe an embedding model.

TEI's bodies ignore unknown keys (serde's default) and take no type coercion: a string where a bool
goes is a 422, as axum's JSON extractor answers. Its errors are ``{"error", "error_type"}``
(``NativeError``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .common import INT32_MAX, TokenId

TEI_EMBED_PATH = "/embed"
TEI_SIMILARITY_PATH = "/similarity"
TEI_RERANK_PATH = "/rerank"  # shared with Jina's and vLLM's /rerank: told apart by ``texts`` vs ``documents``
INFO_PATH = "/info"
TEI_TOKENIZE_PATH = "/tokenize"  # shared with vLLM's /tokenize: told apart by ``inputs`` (``is_tei_tokenize``)
TEI_DECODE_PATH = "/decode"
# TEI's routes for other kinds of model than the mesh's (SPLADE, classifiers) and for token embeddings:
# answered with TEI's own refusal for a model that does not support them (424 ``backend``)
TEI_SPARSE_PATH = "/embed_sparse"
TEI_PREDICT_PATH = "/predict"
TEI_EMBED_ALL_PATH = "/embed_all"
UNSUPPORTED_PATHS = (TEI_SPARSE_PATH, TEI_PREDICT_PATH, TEI_EMBED_ALL_PATH)
COMPAT_PATH = "/"  # TEI's and TGI's route by the body (``native_kind``)

TruncationDirection = Literal["Left", "Right", "left", "right"]


class NativeRequest(BaseModel):
    """A TEI or TGI body: unknown keys are ignored, values are not coerced."""

    model_config = ConfigDict(extra="ignore", strict=True)


class TeiEmbedRequest(NativeRequest):
    inputs: str | list[str] | list[TokenId] | list[list[TokenId]]
    # None and False: an input past the model's maximum is a 413 (TEI's ``--auto-truncate`` off)
    truncate: bool | None = None
    truncation_direction: TruncationDirection = "Right"
    prompt_name: str | None = None
    normalize: bool = True
    dimensions: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None

    def texts(self) -> list[str] | list[list[int]]:
        value = self.inputs
        if isinstance(value, str):
            return [value]
        if value and isinstance(value[0], int):
            return [value]
        return value  # type: ignore[return-value]


class TeiSimilarityInputs(NativeRequest):
    source_sentence: str
    sentences: list[str]


class TeiSimilarityRequest(NativeRequest):
    """TEI's ``/similarity`` (and ``InferenceClient.sentence_similarity``'s ``POST /``): the cosine of
    ``source_sentence`` with each of ``sentences``."""

    inputs: TeiSimilarityInputs
    truncate: bool | None = None
    truncation_direction: TruncationDirection = "Right"
    prompt_name: str | None = None


def is_similarity(body: Any) -> bool:
    return isinstance(body, dict) and isinstance(body.get("inputs"), dict)


class TeiRerankRequest(NativeRequest):
    query: str
    texts: list[str]
    truncate: bool | None = None
    truncation_direction: TruncationDirection = "Right"
    raw_scores: bool = False
    return_text: bool = False


class TeiRank(BaseModel):
    index: int
    text: str | None = None  # only with ``return_text``
    score: float


def is_tei_rerank(body: Any) -> bool:
    """A ``/rerank`` body in TEI's shape (``texts``), not Cohere's or Jina's (``documents``)."""
    return isinstance(body, dict) and "texts" in body and "documents" not in body


class TeiEmbeddingType(BaseModel):
    pooling: str


class TeiClassifierType(BaseModel):
    id2label: dict[str, str]
    label2id: dict[str, int]


class TeiTokenizeRequest(NativeRequest):
    inputs: str | list[str]
    add_special_tokens: bool = True
    prompt_name: str | None = None


class TeiToken(BaseModel):
    """One token as TEI's ``/tokenize`` gives it: ``start`` and ``stop`` are byte offsets into the
    input (None for a special token, whose ``text`` is the token itself)."""

    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


class TeiDecodeRequest(NativeRequest):
    ids: list[TokenId] | list[list[TokenId]]
    skip_special_tokens: bool = True


def is_tei_tokenize(body: Any) -> bool:
    """A ``/tokenize`` body in TEI's shape (``inputs``), not vLLM's (``prompt`` or ``messages``)."""
    return isinstance(body, dict) and "inputs" in body and "prompt" not in body and "messages" not in body
