"""A ``/v1/responses`` request as the chat request the engine already serves.

``instructions`` becomes the first (system) message; input items become chat messages (function
calls join the assistant turn before them, function-call outputs become ``tool`` messages);
function tools, ``tool_choice`` and ``text.format`` take their chat form. What the engine cannot
honour is refused by name before anything runs, and errors raised on the chat form are renamed
back to the Responses field (``messages`` -> ``input``, ``response_format`` -> ``text.format``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from pydantic import ValidationError

from genmesh.protocol import ChatCompletionRequest, OpenAIError, from_validation_error, invalid_request, neutral
from genmesh.protocol import unsupported_parameter as unsupported
from genmesh.protocol.responses import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    FunctionToolChoice,
    MessageItem,
    OtherToolChoice,
    ResponsesRequest,
    TextFormatJsonObject,
    TextFormatJsonSchema,
    UnsupportedItem,
    UnsupportedPart,
    UnsupportedTool,
    parts_text,
)

STATELESS = (
    "this engine is stateless and keeps no responses: send 'previous_response_id' to the gateway, "
    "which stores conversations, or send the whole conversation in 'input'"
)
# Fields that change the reply, with the value that means "not used".
_NEUTRAL: dict[str, Any] = {
    "conversation": None,
    "background": False,
    "prompt": None,
    "include": [],
    "truncation": "disabled",
    "top_logprobs": 0,
    "context_management": [],
    "moderation": None,
}


def check_engine_supported(req: ResponsesRequest) -> None:
    """A 400 naming the first field this engine cannot honour with the value sent."""
    if req.previous_response_id is not None:
        raise invalid_request(STATELESS, param="previous_response_id")
    for name, default in _NEUTRAL.items():
        value = getattr(req, name)
        if not neutral(value, default):
            raise unsupported(name, f"got {_short(value)}")
    if req.reasoning and any(v is not None for v in req.reasoning.values()):
        raise unsupported("reasoning", "this engine serves no reasoning model")
    if req.service_tier not in (None, "auto", "default"):
        raise unsupported("service_tier", f"got {_short(req.service_tier)}")
    if req.text is not None and req.text.verbosity not in (None, "medium"):
        raise unsupported("text.verbosity", f"got {req.text.verbosity!r}")
    for i, tool in enumerate(req.tools or []):
        if isinstance(tool, UnsupportedTool):
            raise unsupported(f"tools[{i}].type", f"tools of type {_short(tool.type)} (function tools only)")
        if tool.defer_loading:
            raise unsupported(f"tools[{i}].defer_loading", "tool search")
    if isinstance(req.tool_choice, OtherToolChoice):
        raise unsupported("tool_choice", f"a tool choice of type {_short(req.tool_choice.type)}")


def to_chat(req: ResponsesRequest) -> ChatCompletionRequest:
    """The chat request that generates this response (call ``check_engine_supported`` first)."""
    body: dict[str, Any] = {"messages": messages_of(req), "stream": bool(req.stream)}
    simple = {
        "model": req.model,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "seed": req.seed,
        "stop": req.stop,
        "user": req.user,
        "max_completion_tokens": req.max_output_tokens,
    }
    body.update({k: v for k, v in simple.items() if v is not None})
    if req.tools:
        functions = [t for t in req.tools if isinstance(t, FunctionTool)]
        body["tools"] = [{"type": "function", "function": _function(t)} for t in functions]
    if isinstance(req.tool_choice, FunctionToolChoice):
        body["tool_choice"] = {"type": "function", "function": {"name": req.tool_choice.name}}
    elif req.tool_choice is not None:
        body["tool_choice"] = req.tool_choice
    fmt = req.text.format if req.text is not None else None
    if isinstance(fmt, TextFormatJsonObject):
        body["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, TextFormatJsonSchema):
        schema = {"name": fmt.name, "schema": fmt.json_schema, "strict": fmt.strict}
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        raise renamed(from_validation_error(exc)) from exc


def _function(tool: FunctionTool) -> dict[str, Any]:
    fields = {"name": tool.name, "description": tool.description, "parameters": tool.parameters, "strict": tool.strict}
    return {k: v for k, v in fields.items() if v is not None}


def messages_of(req: ResponsesRequest) -> list[dict[str, Any]]:
    """Chat messages for ``instructions`` and ``input``; a 400 naming the item that cannot be one."""
    out: list[dict[str, Any]] = []
    if req.instructions:
        out.append({"role": "system", "content": req.instructions})
    if isinstance(req.input, str):
        out.append({"role": "user", "content": req.input})
        return out
    calls: set[str] = set()
    for i, item in enumerate(req.input):
        if isinstance(item, UnsupportedItem):
            raise unsupported(f"input[{i}].type", f"input items of type {_short(item.type)}")
        if isinstance(item, MessageItem):
            _text_only(item.content, f"input[{i}].content")
            out.append({"role": item.role, "content": parts_text(item.content)})
        elif isinstance(item, FunctionCallItem):
            calls.add(item.call_id)
            function = {"name": item.name, "arguments": item.arguments}
            call = {"id": item.call_id, "type": "function", "function": function}
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutputItem):
            if item.call_id not in calls:
                raise invalid_request(
                    f"no function_call item with call_id {_short(item.call_id)} comes before this output",
                    param=f"input[{i}].call_id",
                )
            _text_only(item.output, f"input[{i}].output")
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": parts_text(item.output)})
    if not out:
        raise invalid_request("'input' must hold at least one item", param="input")
    return out


def _text_only(content: object, param: str) -> None:
    if isinstance(content, list):
        for j, part in enumerate(content):
            if isinstance(part, UnsupportedPart):
                raise unsupported(f"{param}[{j}]", f"content of type '{part.type}' (text only)")


# Chat field -> Responses field, for errors raised on the chat form.
_RENAMES = (
    (re.compile(r"^messages(\[\d+\])?(\.[\w.\[\]]+)?$"), "input"),
    (re.compile(r"^max_(completion_)?tokens$"), "max_output_tokens"),
    (re.compile(r"^response_format\.json_schema\.schema"), "text.format.schema"),
    (re.compile(r"^response_format(\.json_schema)?"), "text.format"),
    (re.compile(r"^tools(\[\d+\])\.function"), r"tools\1"),
)


def renamed(err: OpenAIError) -> OpenAIError:
    """``err`` with its chat field names (``param`` and quoted in the message) in Responses terms."""
    param = err.param
    if param is None:
        return err
    for pattern, repl in _RENAMES:
        new = pattern.sub(repl, param)
        if new != param:
            err.message = err.message.replace(f"'{param}'", f"'{new}'")
            err.param = new
            break
    return err


@contextlib.contextmanager
def responses_params() -> Iterator[None]:
    """Errors raised inside name the Responses fields."""
    try:
        yield
    except OpenAIError as err:
        raise renamed(err) from None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "…"
