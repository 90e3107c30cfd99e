"""The response object: what a request echoes, and the output items a generation becomes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from genmesh.protocol.response_objects import (
    IncompleteDetails,
    OutputFunctionCall,
    OutputItem,
    OutputMessage,
    OutputTextPart,
    ResponseObject,
    ResponsesUsage,
)
from genmesh.protocol.responses import ResponsesRequest

from .. import tools


def item_id(prefix: str) -> str:
    """OpenAI-style ids: ``resp_...``, ``msg_...``, ``fc_...``."""
    return f"{prefix}_{uuid.uuid4().hex}"


def shell(req: ResponsesRequest, model: str, created_at: int) -> ResponseObject:
    """The response before any output: ``in_progress``, echoing the request's settings."""
    text = req.text.model_dump(by_alias=True, exclude_none=True) if req.text is not None else None
    return ResponseObject(
        id=item_id("resp"),
        created_at=created_at,
        status="in_progress",
        instructions=req.instructions,
        max_output_tokens=req.max_output_tokens,
        model=model,
        parallel_tool_calls=req.parallel_tool_calls is not False,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        tool_choice=_dump(req.tool_choice) if req.tool_choice is not None else "auto",
        tools=[t.model_dump(exclude_none=True) for t in req.tools or []],
        text=text or {"format": {"type": "text"}},
        metadata=req.metadata or {},
        user=req.user,
    )


def _dump(value: object) -> object:
    dump = getattr(value, "model_dump", None)
    return dump(exclude_none=True, by_alias=True) if dump is not None else value


@dataclass(frozen=True)
class Split:
    """A finished generation as Responses output: its text (None when it is only calls) and calls."""

    text: str | None
    calls: list[OutputFunctionCall]


def split(text: str, plan: tools.ToolPlan | None) -> Split:
    if plan is None:
        return Split(text, [])
    content, calls = tools.parse(text, plan)
    items = [
        OutputFunctionCall(
            id=item_id("fc"),
            call_id=c.id,
            name=c.function.name,
            arguments=c.function.arguments,
            status="completed",
        )
        for c in calls
    ]
    return Split(content if content or not items else None, items)


def message(msg_id: str, text: str, status: str) -> OutputMessage:
    return OutputMessage(id=msg_id, status=status, content=[OutputTextPart(text=text)])  # type: ignore[arg-type]


def usage(prompt_tokens: int, output_tokens: int) -> ResponsesUsage:
    return ResponsesUsage(
        input_tokens=prompt_tokens, output_tokens=output_tokens, total_tokens=prompt_tokens + output_tokens
    )


def finished(
    base: ResponseObject, output: list[OutputItem], reason: str, prompt_tokens: int, output_tokens: int, at: int
) -> ResponseObject:
    """The final object: ``incomplete`` when the token budget cut a reply that is not a call."""
    cut = reason == "length" and not any(isinstance(i, OutputFunctionCall) for i in output)
    return base.model_copy(
        update={
            "status": "incomplete" if cut else "completed",
            "incomplete_details": IncompleteDetails(reason="max_output_tokens") if cut else None,
            "completed_at": None if cut else at,
            "output": output,
            "usage": usage(prompt_tokens, output_tokens),
        }
    )


def unary_output(text: str, reason: str, plan: tools.ToolPlan | None) -> list[OutputItem]:
    parts = split(text, plan)
    out: list[OutputItem] = []
    if parts.text is not None:
        status = "incomplete" if reason == "length" and not parts.calls else "completed"
        out.append(message(item_id("msg"), parts.text, status))
    out.extend(parts.calls)
    return out
