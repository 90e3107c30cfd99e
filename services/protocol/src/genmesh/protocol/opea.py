"""OPEA's microservice shapes, as GenAIComps defines them (``comps/cores/proto/docarray.py`` and
``api_protocol.py``): the documents its pipelines hand from one microservice to the next, and the
bodies of its Whisper and SpeechT5 services.

OPEA's models are docarray documents: they ignore keys they do not know (a document carries its
``id`` and whatever the previous hop added), so these do too, unlike the OpenAI bodies. Their
defaults are OPEA's: ``top_n`` 1, ``stream`` true for an ``LLMParamsDoc``, a temperature of 0.01
and top-p 0.95, the retriever's ``k`` 4. ``max_tokens`` has no default here: the microservice
applies its own setting (OPEA's 1024) where a request gives none.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .common import INT32_MAX

PositiveCount = Annotated[int, Field(ge=1, le=INT32_MAX)]
NonNegative = Annotated[float, Field(ge=0.0)]


class OpeaDoc(BaseModel):
    """An OPEA document: unknown keys are ignored, as docarray's ``BaseDoc`` does."""

    model_config = ConfigDict(extra="ignore")


class TextDoc(OpeaDoc):
    """``TextDoc``: one text (the embedding microservice takes a list too)."""

    text: str | list[str]


class RetrievedDoc(OpeaDoc):
    """A retrieved document: ``TextDoc`` or ``RetrievalResponseData`` (its ``metadata`` kept)."""

    model_config = ConfigDict(extra="allow")
    text: str
    metadata: dict[str, Any] | None = None


class EmbedDoc(OpeaDoc):
    """``EmbedDoc``: the text and its vector, with the retriever's parameters at OPEA's defaults."""

    text: str | list[str]
    embedding: list[float] | list[list[float]]
    search_type: str = "similarity"
    k: PositiveCount = 4
    distance_threshold: float | None = None
    fetch_k: PositiveCount = 20
    lambda_mult: NonNegative = 0.5
    score_threshold: NonNegative = 0.2


class SearchedDoc(OpeaDoc):
    """``SearchedDoc``: what OPEA's retriever answers, and what its reranking microservice takes."""

    initial_query: Annotated[str, Field(min_length=1)]
    retrieved_docs: list[RetrievedDoc]
    top_n: PositiveCount = 1

    def texts(self) -> list[str]:
        return [d.text for d in self.retrieved_docs]


class RerankingRequest(OpeaDoc):
    """``RerankingRequest`` (api_protocol): ``input`` and the documents, as objects or strings."""

    input: Annotated[str, Field(min_length=1)]
    retrieved_docs: list[RetrievedDoc | str]
    top_n: PositiveCount = 1

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.retrieved_docs]


class RerankingResponseData(BaseModel):
    text: str
    score: float


class RerankingResponse(BaseModel):
    """``RerankingResponse``: the best ``top_n`` documents, best first, with their scores."""

    reranked_docs: list[RerankingResponseData]


class LLMParamsDoc(OpeaDoc):
    """``LLMParamsDoc``: a question, the documents to answer it from, and OPEA's sampling parameters.

    What OPEA's reranking microservice answers and its LLM microservice takes; the parameters OPEA's
    LLM microservice passes on (``max_tokens``, ``temperature``, ``top_p``, ``frequency_penalty``,
    ``stream``) are the ones honoured, with OPEA's defaults."""

    model: str | None = None
    query: Annotated[str, Field(min_length=1)]
    documents: list[str] = Field(default_factory=list)
    max_tokens: PositiveCount | None = None
    max_new_tokens: PositiveCount | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.01
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 0.95
    frequency_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] = 0.0
    stream: bool = True
    chat_template: str | None = None

    @field_validator("documents", mode="before")
    @classmethod
    def _texts(cls, value: Any) -> Any:
        """OPEA's documents are strings or dicts with ``text`` (its RAG template reads the text)."""
        if isinstance(value, list):
            return [d.get("text", d) if isinstance(d, dict) else d for d in value]
        return value


class AsrRequest(OpeaDoc):
    """OPEA's Whisper service, ``POST /v1/asr``: the audio file (any format), base64."""

    audio: Annotated[str, Field(min_length=1)]
    language: str | None = None


class AsrResponse(BaseModel):
    asr_result: str


class TtsRequest(OpeaDoc):
    """OPEA's SpeechT5 service, ``POST /v1/tts``: text to speak, and a voice (``default``: the served one)."""

    text: Annotated[str, Field(min_length=1)]
    voice: str | None = None


class TtsResponse(BaseModel):
    """The spoken text as a base64 WAV file."""

    tts_result: str


_SLOT = re.compile(r"\{(context|question)\}")
RAG_TEMPLATE = (
    "### You are a helpful, respectful and honest assistant. Answer the question from the search results "
    "below; leave out anything in them that does not bear on the question, and if you do not know the "
    "answer, say so rather than make one up.\n"
    "### Search results: {context}\n"
    "### Question: {question}\n"
    "### Answer:\n"
)


def rag_prompt(question: str, documents: list[str], template: str | None = None) -> str:
    """The prompt OPEA's LLM microservice makes of a question and documents: ``template`` when it names
    ``{question}`` (and ``{context}``), else the RAG template (the question alone when no documents)."""
    values = {"context": "\n".join(documents), "question": question}
    if template is None or "{question}" not in template:
        if not documents:
            return question
        template = RAG_TEMPLATE
    return _SLOT.sub(lambda m: values[m.group(1)], template)
