"""The OpenAI wire format, defined once and shared by every genmesh service."""

from .chat import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    ChatMessage,
    OtherPart,
    TextPart,
)
from .common import FinishReason, ModelCard, ModelList, StreamOptions, StrictRequest, Usage, new_id, now
from .completions import CompletionChoice, CompletionRequest, CompletionResponse
from .errors import (
    ErrorDetail,
    ErrorResponse,
    OpenAIError,
    from_validation_error,
    internal_error,
    invalid_request,
    model_not_found,
    service_unavailable,
    unsupported_parameter,
)
from .sampling import SamplingFields, neutral

__all__ = [
    "AssistantMessage",
    "ChatChoice",
    "ChatChunkChoice",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "ChatDelta",
    "ChatMessage",
    "CompletionChoice",
    "CompletionRequest",
    "CompletionResponse",
    "ErrorDetail",
    "ErrorResponse",
    "FinishReason",
    "ModelCard",
    "ModelList",
    "OpenAIError",
    "OtherPart",
    "SamplingFields",
    "StreamOptions",
    "StrictRequest",
    "TextPart",
    "Usage",
    "from_validation_error",
    "internal_error",
    "invalid_request",
    "model_not_found",
    "neutral",
    "new_id",
    "now",
    "service_unavailable",
    "unsupported_parameter",
]
