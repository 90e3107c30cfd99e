"""``/v1/chat/completions``: request, response and stream chunk."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from .common import INT32_MAX, CompletionEnvelope, FinishReason, PromptLogprobs, Usage
from .sampling import SamplingFields
from .spoken import ChatAudioDelta, ChatAudioOutput, ChatCompletionAudio, InputAudioPart, SpokenUsage

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    text: str


class OtherPart(BaseModel):
    """A content part we can name in an error (images, files) but not use."""

    model_config = ConfigDict(extra="allow")
    type: Literal["image_url", "file", "refusal"]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Role
    content: str | list[TextPart | InputAudioPart | OtherPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(BaseModel):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    name: str = "response"
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=INT32_MAX)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool | None = True
    continue_final_message: bool | None = False  # vLLM's: the last (assistant) message is continued
    store: bool | None = None
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    reasoning_effort: str | None = None
    modalities: list[Literal["text", "audio"]] | None = None
    prediction: dict[str, Any] | None = None
    audio: ChatAudioOutput | None = None  # the spoken reply's voice and format (modalities: audio)
    web_search_options: dict[str, Any] | None = None

    def completion_limit(self) -> int | None:
        """``max_completion_tokens`` takes precedence over the deprecated ``max_tokens``."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def spoken(self) -> bool:
        """A spoken turn (spoken.py): audio asked for, or ``input_audio`` among the messages' parts."""
        if self.audio is not None or (self.modalities is not None and "audio" in self.modalities):
            return True
        return any(
            isinstance(m.content, list) and any(isinstance(p, InputAudioPart) for p in m.content) for m in self.messages
        )


class FunctionCall(BaseModel):
    name: str
    arguments: str


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionCallDelta(BaseModel):
    """A streamed call's function: its name in the first delta, then its arguments in fragments."""

    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(BaseModel):
    index: int = 0
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    audio: ChatCompletionAudio | None = None

    @model_serializer
    def _drop_empty_tool_calls(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.model_dump() for c in self.tool_calls]
        if self.audio is not None:
            out["audio"] = self.audio.model_dump()
        return out


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason | None = None


class ChatCompletionResponse(CompletionEnvelope[ChatChoice]):
    object: Literal["chat.completion"] = "chat.completion"
    usage: Usage
    prompt_logprobs: PromptLogprobs | None = None


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None
    audio: ChatAudioDelta | None = None

    @model_serializer
    def _drop_unset(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in (("role", self.role), ("content", self.content)) if v is not None}
        if self.tool_calls is not None:
            out["tool_calls"] = [c.model_dump(exclude_none=True) for c in self.tool_calls]
        if self.audio is not None:
            out["audio"] = self.audio.model_dump(exclude_none=True)
        return out


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: ChatDelta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(CompletionEnvelope[ChatChunkChoice]):
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    prompt_logprobs: PromptLogprobs | None = None  # vLLM's, on the first chunk only


class SpokenChatResponse(ChatCompletionResponse):
    """A spoken turn's reply: its usage also says the audio transcribed and the characters spoken."""

    usage: SpokenUsage


class SpokenChatChunk(ChatCompletionChunk):
    usage: SpokenUsage | None = None
