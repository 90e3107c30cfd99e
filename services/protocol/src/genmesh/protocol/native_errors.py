"""The error body of TEI and TGI, ``{"error": "...", "error_type": "..."}``, and the status each
answers with, made from the ``OpenAIError`` that every genmesh service raises.

TEI and TGI read their bodies with axum's JSON extractor: a body that is not JSON is a 400, a field
of the wrong type a 422. TGI's validation errors are 422 (``validation``); TEI's status follows its
error type (``TEI_STATUS``): 422 ``validation`` (too many inputs, an input past the model's maximum),
400 ``empty``. A route
that knows TEI's or TGI's own status raises ``native(...)``; any other 4xx (a 400 from the engine's
common checks) becomes a 422 ``validation``; 429 is ``overloaded``, 503 ``unhealthy``, other 5xx
``backend``. A refusal made before any route reads the body (the HTTP server's 408, 413, 431 and
503, the gateway's 401 and 429) keeps its status and takes their shape on their paths
(``refuses_natively``), its ``Retry-After`` kept."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .errors import OpenAIError, from_validation_error
from .tei import (
    COMPAT_PATH,
    INFO_PATH,
    TEI_DECODE_PATH,
    TEI_EMBED_PATH,
    TEI_RERANK_PATH,
    TEI_SIMILARITY_PATH,
    TEI_TOKENIZE_PATH,
    UNSUPPORTED_PATHS,
)
from .tgi import TGI_GENERATE_PATH, TGI_STREAM_PATH

NATIVE_TYPES = frozenset({"validation", "empty", "tokenizer", "overloaded", "unhealthy", "backend", "generation"})
_TYPE_BY_STATUS = {429: "overloaded", 503: "unhealthy"}

# The paths that are TEI's or TGI's alone: every refusal on them, at every hop, is in their shape.
TEI_PATHS = (TEI_EMBED_PATH, TEI_SIMILARITY_PATH, TEI_DECODE_PATH, *UNSUPPORTED_PATHS)
# Paths TEI shares with another API's body (Jina's and vLLM's ``/rerank``, vLLM's ``/tokenize``)
SHARED_PATHS = (TEI_RERANK_PATH, TEI_TOKENIZE_PATH)
NATIVE_PATHS = frozenset((*TEI_PATHS, TGI_GENERATE_PATH, TGI_STREAM_PATH, COMPAT_PATH, INFO_PATH))


def refuses_natively(path: str) -> bool:
    """Whether a refusal made before the request's body is read (by the HTTP server, or the gateway's
    admission) is in TEI's and TGI's shape: on their own paths, and on ``/rerank`` and ``/tokenize``,
    which TEI shares with Jina's and vLLM's bodies (once the body is read, the body decides:
    ``tei.is_tei_rerank``, ``tei.is_tei_tokenize``)."""
    return path in NATIVE_PATHS or path in SHARED_PATHS


def native(message: str, status: int, error_type: str) -> OpenAIError:
    """An error whose status and ``error_type`` are TEI's or TGI's own."""
    assert error_type in NATIVE_TYPES
    return OpenAIError(message, status=status, type=error_type)


# TEI's status for each of its error types (its router's ``From<&ErrorType> for StatusCode``; since TEI
# 1.9 a validation error, too many inputs or one too long, is a 422, no longer a 413)
TEI_STATUS = {"unhealthy": 503, "backend": 424, "overloaded": 429, "tokenizer": 422, "validation": 422, "empty": 400}


def tei_error(message: str, error_type: str) -> OpenAIError:
    """An error as TEI raises it: its ``error_type`` and the status TEI gives that type."""
    return native(message, TEI_STATUS[error_type], error_type)


def native_error_type(err: OpenAIError) -> str:
    """TEI's and TGI's ``error_type`` for ``err``: its own where it has one, else by its status."""
    if err.type in NATIVE_TYPES:
        return err.type
    return _TYPE_BY_STATUS.get(err.status, "validation" if err.status < 500 else "backend")


def native_body(err: OpenAIError) -> dict[str, Any]:
    return {"error": err.message, "error_type": native_error_type(err)}


def native_status_and_body(err: OpenAIError) -> tuple[int, dict[str, Any]]:
    """A route's error as TEI and TGI answer it (the engine's common 400s are their 422)."""
    mapped = err.type not in NATIVE_TYPES and err.status == 400 and err.code != "invalid_json"
    return 422 if mapped else err.status, native_body(err)


def native_validation_error(exc: ValidationError | Any) -> OpenAIError:
    """A body that does not fit the wire model: TEI's and TGI's 422 ``validation``, naming the field."""
    return native(from_validation_error(exc).message, 422, "validation")


def is_native_error(body: Any) -> bool:
    """Whether an upstream's error body is TEI's or TGI's shape (relayed as it is)."""
    return isinstance(body, dict) and isinstance(body.get("error"), str) and "error_type" in body
