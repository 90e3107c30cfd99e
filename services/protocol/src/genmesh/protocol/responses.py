"""``POST /v1/responses``: the request, its input items, tools and text format.

Input items are told apart by ``type`` (a message may leave it out, as OpenAI allows). The item
and content types genmesh can use are modelled field by field; any other type is kept by name
(``UnsupportedItem``, ``UnsupportedPart``, ``UnsupportedTool``), so that the server refuses it
with a 400 naming the exact place (``input[2].type``) instead of guessing.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from .common import StrictRequest

ItemStatus = Literal["in_progress", "completed", "incomplete"]
# OpenAI's item and part types that carry images, files, audio, hosted tools or reasoning: known by
# name, never used. A type outside these and the modelled ones is a plain validation error.
UNSUPPORTED_ITEM_TYPES = (
    "reasoning",
    "item_reference",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "web_search_call",
    "image_generation_call",
    "code_interpreter_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "mcp_call",
    "custom_tool_call",
    "custom_tool_call_output",
    "tool_search_call",
    "tool_search_output",
    "additional_tools",
    "compaction",
    "compaction_trigger",
    "program",
    "program_output",
)
UnsupportedPartType = Literal["input_image", "input_file", "input_audio"]


class InputText(StrictRequest):
    type: Literal["input_text"]
    text: str
    prompt_cache_breakpoint: dict[str, Any] | None = None


class OutputText(StrictRequest):
    type: Literal["output_text"]
    text: str
    annotations: list[dict[str, Any]] | None = None
    logprobs: list[dict[str, Any]] | None = None


class Refusal(StrictRequest):
    type: Literal["refusal"]
    refusal: str


class UnsupportedPart(BaseModel):
    """Images, files and audio: named in a 400 by the server, which reads text only."""

    model_config = ConfigDict(extra="allow")
    type: UnsupportedPartType


def _type_of(value: Any, default: str | None = None) -> str:
    """The ``type`` of a raw item (a dict) or of a validated one, for the discriminators below."""
    return str(value.get("type", default) if isinstance(value, dict) else getattr(value, "type", default))


def _part_kind(value: Any) -> str:
    kind = _type_of(value)
    return {"input_text": "InputText", "output_text": "OutputText", "refusal": "Refusal"}.get(kind, "UnsupportedPart")


ContentPart = Annotated[
    Annotated[InputText, Tag("InputText")]
    | Annotated[OutputText, Tag("OutputText")]
    | Annotated[Refusal, Tag("Refusal")]
    | Annotated[UnsupportedPart, Tag("UnsupportedPart")],
    Discriminator(_part_kind),
]


def _str_or_list(value: Any) -> str:
    return "str" if isinstance(value, str) else "list"


TextOrParts = Annotated[
    Annotated[str, Tag("str")] | Annotated[list[ContentPart], Tag("list")], Discriminator(_str_or_list)
]


def parts_text(content: str | list[ContentPart]) -> str:
    """The text of a message's (or a tool output's) content."""
    if isinstance(content, str):
        return content
    out: list[str] = []
    for part in content:
        if isinstance(part, (InputText, OutputText)):
            out.append(part.text)
        elif isinstance(part, Refusal):
            out.append(part.refusal)
    return "".join(out)


class MessageItem(StrictRequest):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: TextOrParts
    id: str | None = None
    status: ItemStatus | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallItem(StrictRequest):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str
    arguments: str
    id: str | None = None
    status: ItemStatus | None = None
    namespace: str | None = None
    caller: dict[str, Any] | None = None


class FunctionCallOutputItem(StrictRequest):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: TextOrParts
    id: str | None = None
    status: ItemStatus | None = None
    name: str | None = None
    namespace: str | None = None
    caller: dict[str, Any] | None = None


class UnsupportedItem(BaseModel):
    """An OpenAI item type genmesh does not serve (reasoning, hosted tools, item references)."""

    model_config = ConfigDict(extra="allow")
    type: str

    @field_validator("type")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in UNSUPPORTED_ITEM_TYPES:
            expected = "'message', 'function_call' or 'function_call_output'"
            raise ValueError(f"unknown input item type {value[:64]!r} (expected {expected})")
        return value


def _item_kind(value: Any) -> str:
    kinds = {"message": "Message", "function_call": "FunctionCall", "function_call_output": "FunctionCallOutput"}
    return kinds.get(_type_of(value, "message"), "UnsupportedItem")


InputItem = Annotated[
    Annotated[MessageItem, Tag("Message")]
    | Annotated[FunctionCallItem, Tag("FunctionCall")]
    | Annotated[FunctionCallOutputItem, Tag("FunctionCallOutput")]
    | Annotated[UnsupportedItem, Tag("UnsupportedItem")],
    Discriminator(_item_kind),
]


class FunctionTool(StrictRequest):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: bool | None = None
    allowed_callers: list[str] | None = None
    output_schema: dict[str, Any] | None = None


class UnsupportedTool(BaseModel):
    """A hosted tool (web search, file search, MCP, ...): named in a 400 by the server."""

    model_config = ConfigDict(extra="allow")
    type: str


def _tool_kind(value: Any) -> str:
    return "FunctionTool" if _type_of(value) == "function" else "UnsupportedTool"


Tool = Annotated[
    Annotated[FunctionTool, Tag("FunctionTool")] | Annotated[UnsupportedTool, Tag("UnsupportedTool")],
    Discriminator(_tool_kind),
]


class FunctionToolChoice(StrictRequest):
    type: Literal["function"]
    name: str


class OtherToolChoice(BaseModel):
    """``allowed_tools``, a hosted tool, MCP or a custom tool: named in a 400 by the server."""

    model_config = ConfigDict(extra="allow")
    type: str


def _choice_kind(value: Any) -> str:
    if isinstance(value, str):
        return "Mode"
    return "Function" if _type_of(value) == "function" else "Other"


ResponsesToolChoice = Annotated[
    Annotated[Literal["none", "auto", "required"], Tag("Mode")]
    | Annotated[FunctionToolChoice, Tag("Function")]
    | Annotated[OtherToolChoice, Tag("Other")],
    Discriminator(_choice_kind),
]


class TextFormatText(StrictRequest):
    type: Literal["text"]


class TextFormatJsonObject(StrictRequest):
    type: Literal["json_object"]


class TextFormatJsonSchema(StrictRequest):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["json_schema"]
    name: str = "response"
    json_schema: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


def _format_kind(value: Any) -> str:
    return {"json_object": "JsonObject", "json_schema": "JsonSchema"}.get(_type_of(value), "Text")


TextFormat = Annotated[
    Annotated[TextFormatText, Tag("Text")]
    | Annotated[TextFormatJsonObject, Tag("JsonObject")]
    | Annotated[TextFormatJsonSchema, Tag("JsonSchema")],
    Discriminator(_format_kind),
]


class TextConfig(StrictRequest):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponsesStreamOptions(StrictRequest):
    include_obfuscation: bool | None = None


class ResponsesRequest(StrictRequest):
    """Every field of OpenAI's request is declared, so each one is served or refused by name."""

    model: str | None = None
    input: Annotated[Annotated[str, Tag("str")] | Annotated[list[InputItem], Tag("list")], Discriminator(_str_or_list)]
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    tools: list[Tool] | None = None
    tool_choice: ResponsesToolChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    stream: bool | None = False
    stream_options: ResponsesStreamOptions | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    reasoning: dict[str, Any] | None = None
    background: bool | None = None
    service_tier: str | None = None
    max_tool_calls: int | None = Field(default=None, ge=1)
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    context_management: list[dict[str, Any]] | None = None
    moderation: dict[str, Any] | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _input_shape(cls, value: Any) -> Any:
        if not isinstance(value, (str, list)):
            raise ValueError(f"must be a string or a list of input items, got {type(value).__name__}")
        return value

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)
