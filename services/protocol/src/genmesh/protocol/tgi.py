"""Text Generation Inference's native API (huggingface/text-generation-inference): ``POST /generate``,
``POST /generate_stream`` (one SSE event per token, the last with ``generated_text`` and
``details``), TGI's ``POST /`` (``stream`` picks one of the two; the unary reply is a list of one),
and ``GET /info``, whose body here is TGI's and TEI's fields together (``NativeInfo``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from .common import INT32_MAX, Seed
from .tei import (
    TEI_EMBED_PATH,
    TEI_SIMILARITY_PATH,
    NativeRequest,
    TeiClassifierType,
    TeiEmbeddingType,
    TeiEmbedRequest,
    TeiSimilarityRequest,
)

TGI_GENERATE_PATH = "/generate"
TGI_STREAM_PATH = "/generate_stream"
# Without ``max_new_tokens``: TGI 1.x's default (the engine's --tgi-default-max-new-tokens; the
# gateway's estimate of a stream's completion when the request gives none).
DEFAULT_MAX_NEW_TOKENS = 100


class TgiParameters(NativeRequest):
    best_of: Annotated[int, Field(ge=1, le=1)] | None = None  # one sequence: best_of 2+ is refused
    decoder_input_details: bool = False
    details: bool = False
    do_sample: bool = False
    frequency_penalty: float | None = None
    max_new_tokens: Annotated[int, Field(le=INT32_MAX)] | None = None
    repetition_penalty: float | None = None
    return_full_text: bool | None = None
    seed: Seed | None = None
    stop: list[str] = Field(default_factory=list)
    temperature: float | None = None
    top_k: Annotated[int, Field(le=INT32_MAX)] | None = None
    top_n_tokens: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    top_p: float | None = None
    truncate: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    typical_p: float | None = None
    watermark: bool = False
    adapter_id: str | None = None
    grammar: dict[str, Any] | None = None


class TgiGenerateRequest(NativeRequest):
    inputs: str
    parameters: TgiParameters = Field(default_factory=TgiParameters)
    stream: bool = False  # TGI's ``POST /`` only


def is_tgi_request(body: Any) -> bool:
    """A ``POST /`` body for TGI (its clients always send ``parameters`` or ``stream``), not TEI's
    (``InferenceClient.sentence_similarity`` sends ``parameters`` too, with ``inputs`` an object)."""
    if not isinstance(body, dict) or isinstance(body.get("inputs"), dict):
        return False
    return "parameters" in body or "stream" in body


FinishReason = Literal["length", "eos_token", "stop_sequence"]


class TgiToken(BaseModel):
    id: int
    text: str
    logprob: float | None = None
    special: bool = False


class TgiPrefillToken(BaseModel):
    id: int
    text: str
    logprob: float | None = None


class TgiDetails(BaseModel):
    finish_reason: FinishReason
    generated_tokens: int
    seed: int | None = None
    prefill: list[TgiPrefillToken] = Field(default_factory=list)
    tokens: list[TgiToken] = Field(default_factory=list)
    top_tokens: list[list[TgiToken]] = Field(default_factory=list)


class TgiGenerateResponse(BaseModel):
    generated_text: str
    details: TgiDetails | None = None


class TgiStreamDetails(BaseModel):
    finish_reason: FinishReason
    generated_tokens: int
    seed: int | None = None
    input_length: int


class TgiStreamResponse(BaseModel):
    index: int
    token: TgiToken
    top_tokens: list[TgiToken] | None = None
    generated_text: str | None = None
    details: TgiStreamDetails | None = None


class NativeInfo(BaseModel):
    """``GET /info``: TGI's fields (``model_id``: the chat model, when there is one) and TEI's
    (``model_type``: {"embedding": ...} or {"reranker": ...}; ``max_input_length``), one body,
    since TGI and TEI both claim the path and the mesh serves both kinds at once."""

    model_id: str
    model_sha: str | None = None
    model_dtype: str
    model_device_type: str = "cpu"
    model_pipeline_tag: str | None = None
    max_concurrent_requests: int
    max_best_of: int = 1
    max_stop_sequences: int = 4
    max_input_tokens: int | None = None
    max_total_tokens: int | None = None
    validation_workers: int = 1
    max_client_batch_size: int
    router: str = "genmesh"
    # TEI
    model_type: dict[str, TeiEmbeddingType | TeiClassifierType] | None = None  # one key: the kind
    embedding_model_id: str | None = None
    prompts: dict[str, str] | None = None
    default_prompt_name: str | None = None
    default_prompt: str | None = None
    max_input_length: int | None = None
    max_batch_tokens: int | None = None
    max_batch_requests: int | None = None
    auto_truncate: bool = False
    tokenization_workers: int = 1
    version: str
    sha: str | None = None
    docker_label: str | None = None


# The bodies of the native routes, for each hop's OpenAPI document (``service_app``'s ``documented``).
NATIVE_REQUEST_MODELS: dict[str, type[BaseModel]] = {
    TEI_EMBED_PATH: TeiEmbedRequest,
    TEI_SIMILARITY_PATH: TeiSimilarityRequest,
    TGI_GENERATE_PATH: TgiGenerateRequest,
    TGI_STREAM_PATH: TgiGenerateRequest,
}
