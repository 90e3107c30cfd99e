"""Tool calling: prompt the model with the tools, constrain its calls, parse them back.

Three formats, picked from the model's chat template, or named by ``--tool-call-parser`` (vLLM's
names ``hermes``, ``llama3_json`` and ``qwen3_coder``; a graph.pbtxt's ``tool_parser``, OVMS's ``hermes3``,
``llama3`` and ``qwen3coder``):

- ``llama3_json`` (Llama 3.x templates): the template renders the tools itself; a call is
  ``{"name": ..., "parameters": {...}}`` and OpenVINO GenAI's ``Llama3JsonToolParser`` reads it.
- ``hermes`` (everything else, also the fallback for templates that know nothing of tools,
  such as SmolLM2's): calls are ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.
  When the template cannot render tools, they are described in a system message.
- ``qwen3coder`` (Qwen3-Coder templates, which teach ``<function=`` and ``<parameter=``): XML-style
  calls, ``<tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>``, read
  by qwen3coder.py, values typed by the tool's JSON schema. Described in a system message, too, when
  the template cannot render tools.

The engine's grammar support keeps calls valid: with ``tool_choice`` ``required`` or a named
function the whole reply is one call that must match the tool's JSON schema; with ``auto`` the
reply is free text until the model opens ``<tool_call>``, after which the call must match
(structural tags; Hermes only: ``auto`` calls in the other formats are the model's own, parsed
after). ``--no-enable-auto-tool-choice`` refuses ``auto`` (vLLM without ``--enable-auto-tool-choice``);
forced calls stay available. Streamed calls: hermes_stream.py (Hermes), qwen3coder.py (Qwen3-Coder).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from genmesh.protocol import (
    ChatCompletionRequest,
    ChatMessage,
    FunctionCall,
    NamedToolChoice,
    ToolCall,
    ToolDefinition,
    invalid_request,
)

from ..core.ipc import Constraint, StructuralTag
from ..grammar import GrammarLimits
from . import qwen3coder
from .hermes_stream import CLOSE, OPEN, new_call_id, opens_with_call, partial_suffix
from .structured_output import schema_constraint_text

_CALL_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|$)", re.DOTALL)
Format = Literal["hermes", "llama3_json", "qwen3coder"]
# Parser names the engine takes (--tool-call-parser, graph.pbtxt tool_parser) and the format each means.
PARSERS: dict[str, Format] = {
    "hermes": "hermes",
    "hermes3": "hermes",
    "llama3_json": "llama3_json",
    "llama3": "llama3_json",
    "qwen3_coder": "qwen3coder",
    "qwen3coder": "qwen3coder",
}


def template_format(template: str, parser: str | None = None) -> tuple[Format, bool]:
    """The call format a chat template expects (or ``parser`` names), and whether it renders ``tools`` itself."""
    native = "tools" in template
    if parser is not None:
        return PARSERS[parser], native
    if native and "<|start_header_id|>" in template:
        return "llama3_json", True
    if native and "<function=" in template and "<parameter=" in template:  # Qwen3-Coder's template teaches its form
        return "qwen3coder", True
    return "hermes", native


@dataclass(frozen=True)
class ToolPlan:
    mode: Literal["auto", "required", "named"]
    tools: list[ToolDefinition]
    format: Format
    native: bool
    constraint: Constraint | None

    @property
    def args_key(self) -> str:
        return _args_key(self.format)

    def template_tools(self) -> list[dict[str, Any]]:
        return [t.model_dump(exclude_none=True) for t in self.tools]


def _args_key(fmt: Format) -> str:
    """Where a call's arguments go: Llama 3 writes ``parameters``, Hermes ``arguments``."""
    return "parameters" if fmt == "llama3_json" else "arguments"


def _call_schema(tool: ToolDefinition, args_key: str) -> dict[str, Any]:
    # No parameters: the function takes no arguments (OpenAI), so its arguments are "{}".
    params = tool.function.parameters or {"type": "object", "properties": {}}
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": [tool.function.name]}, args_key: params},
        "required": ["name", args_key],
        "additionalProperties": False,
    }


def plan_tools(
    req: ChatCompletionRequest,
    template: str,
    limits: GrammarLimits,
    parser: str | None = None,
    auto_tool_choice: bool = True,
) -> ToolPlan | None:
    """How this request uses its tools; None when it does not (no tools, or ``tool_choice: none``).
    ``parser``: the call format by name (None: from the template); ``auto_tool_choice`` False refuses
    ``tool_choice: auto`` (the default when tools are given), as vLLM does without ``--enable-auto-tool-choice``."""
    tools = req.tools or []
    choice = req.tool_choice
    if isinstance(choice, NamedToolChoice):
        named = [t for t in tools if t.function.name == choice.function.name]
        if not named:
            raise invalid_request(
                f"tool_choice names function '{choice.function.name}', which is not among 'tools'",
                param="tool_choice",
            )
        tools_for_call, mode = named, "named"
    elif choice == "required":
        if not tools:
            raise invalid_request("tool_choice 'required' needs at least one tool in 'tools'", param="tool_choice")
        tools_for_call, mode = tools, "required"
    elif choice == "none" or not tools:
        return None
    elif not auto_tool_choice:
        raise invalid_request(
            "tool_choice 'auto' is off on this server (--enable-auto-tool-choice): "
            "use 'required', a named function or 'none'",
            param="tool_choice",
        )
    else:
        tools_for_call, mode = tools, "auto"
    for i, tool in enumerate(tools):
        if tool.function.parameters is not None:  # checked alone first, so a 400 names the tool's own field
            schema_constraint_text(tool.function.parameters, f"tools[{i}].function.parameters", limits)
    fmt, native = template_format(template, parser)
    schemas = [_call_schema(t, _args_key(fmt)) for t in tools_for_call]
    constraint: Constraint | None
    if mode != "auto":
        schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
        constraint = Constraint(grammar=schema_constraint_text(schema, "tools", limits))
    elif fmt == "hermes":
        tags = [StructuralTag(OPEN, schema_constraint_text(s, "tools", limits), CLOSE) for s in schemas]
        constraint = Constraint(tags=tags, triggers=[OPEN])
    else:
        constraint = None  # the model's own format; the library's parser reads it
    return ToolPlan(mode, tools, fmt, native, constraint)  # type: ignore[arg-type]


def system_prompt(plan: ToolPlan) -> str:
    """Tool instructions for templates that cannot render tools (Hermes style, or Qwen3-Coder's XML
    calls for that format; a forced call is one JSON object in every format, as its grammar has it)."""
    listing = "\n".join(json.dumps(t.model_dump(exclude_none=True)) for t in plan.tools)
    if plan.mode == "auto" and plan.format == "qwen3coder":
        how = (
            "If a function helps, reply with one or more calls, each as\n"
            f"{_xml_call('<function-name>', {'<parameter-name>': '<value>'})}\n"
            "with one <parameter=...> element per argument. Otherwise answer normally."
        )
    elif plan.mode == "auto":
        how = (
            "If a function helps, reply with one or more calls, each as\n"
            f'{OPEN}{{"name": <function-name>, "arguments": <arguments-object>}}{CLOSE}\n'
            "Otherwise answer normally."
        )
    else:
        how = 'Reply with exactly one function call as a JSON object {"name": ..., "arguments": {...}}.'
    return f"You may call functions. Available functions:\n{listing}\n{how}"


def history(messages: list[ChatMessage], plan: ToolPlan | None) -> list[dict[str, Any]]:
    """Chat history for the template, with earlier tool calls and tool results in a form it renders."""
    native = plan is not None and plan.native
    xml = plan is not None and plan.format == "qwen3coder"
    out: list[dict[str, Any]] = []
    for msg in messages:
        role = "system" if msg.role == "developer" else msg.role
        entry: dict[str, Any] = {"role": role, "content": msg.text()}
        if msg.tool_calls:
            calls = [_history_call(c) for c in msg.tool_calls]
            if native:
                entry["tool_calls"] = [{"type": "function", "function": c} for c in calls]
            else:
                text = "".join(
                    _xml_call(c["name"], c["arguments"]) if xml else f"{OPEN}{json.dumps(c)}{CLOSE}" for c in calls
                )
                entry["content"] = (entry["content"] + "\n" if entry["content"] else "") + text
        if msg.tool_call_id is not None:
            entry["tool_call_id"] = msg.tool_call_id
        if role == "function":
            entry["role"] = "tool"
        out.append(entry)
    if plan is not None and not plan.native:
        prompt = system_prompt(plan)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}"}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


def _history_call(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function") or {}
    args = fn.get("arguments", {})
    if isinstance(args, str):
        with contextlib.suppress(json.JSONDecodeError):
            args = json.loads(args) if args.strip() else {}
    return {"name": fn.get("name", ""), "arguments": args}


def _xml_call(name: str, arguments: Any) -> str:
    """A call in Qwen3-Coder's form: strings as written, other values as JSON (arguments that are not
    an object, which the form cannot split into parameters, as the function's body)."""
    if not isinstance(arguments, dict):
        body = f"{arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)}\n"
    else:
        body = "".join(
            f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}\n</parameter>\n"
            for k, v in arguments.items()
        )
    return f"{OPEN}\n<function={name}>\n{body}</function>\n{CLOSE}"


def _tool_call(name: str, arguments: Any) -> ToolCall:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id=new_call_id(), function=FunctionCall(name=name, arguments=args))


def _from_object(obj: Any, args_key: str) -> ToolCall | None:
    if isinstance(obj, dict) and isinstance(obj.get("name"), str):
        return _tool_call(obj["name"], obj.get(args_key, obj.get("arguments", {})))
    return None


def parse(text: str, plan: ToolPlan) -> tuple[str | None, list[ToolCall]]:
    """Split a finished reply into its content (None when it is only calls) and its tool calls."""
    if plan.mode != "auto":
        try:
            call = _from_object(json.loads(text), plan.args_key)
        except json.JSONDecodeError:
            call = None
        return (None, [call]) if call is not None else (text, [])
    if plan.format == "llama3_json":
        return _parse_llama3(text)
    if plan.format == "qwen3coder":
        return qwen3coder.parse(text, plan.tools)
    return parse_hermes(text, plan.args_key)


def parse_hermes(text: str, args_key: str = "arguments") -> tuple[str | None, list[ToolCall]]:
    """Every well-formed ``<tool_call>`` block of a whole reply as a call, after a bare call object that
    opens it (hermes_stream.py); the rest (malformed blocks included, markup and all) is the content
    (None when nothing but calls and whitespace is left)."""
    calls: list[ToolCall] = []

    def take(match: re.Match[str]) -> str:
        try:
            call = _from_object(json.loads(match.group(1).strip()), args_key)
        except json.JSONDecodeError:
            call = None
        if call is None:
            return match.group(0)
        calls.append(call)
        return ""

    rest, bare = _bare_call(text, args_key)
    if bare:
        calls.extend(bare)
        text = rest or ""
    content = _CALL_BLOCK.sub(take, text)
    if not calls:
        return text, []
    return content.strip() or None, calls


def _bare_call(text: str, args_key: str) -> tuple[str | None, list[ToolCall]]:
    """A reply that opens with a call object without the markup (hermes_stream.py): that call, and
    the rest as content; any other reply as it is."""
    body = text.lstrip()
    if not body.startswith("{"):
        return text, []
    try:
        obj, end = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError:
        return text, []
    if not opens_with_call(body[:end]):  # the streamed reader's rule (hermes_stream.py)
        return text, []
    call = _from_object(obj, args_key)
    if call is None:
        return text, []
    return body[end:].strip() or None, [call]


def _parse_llama3(text: str) -> tuple[str | None, list[ToolCall]]:
    import openvino_genai as ov_genai

    message: dict[str, Any] = {"content": text}
    ov_genai.Llama3JsonToolParser().parse(message)
    found = message.get("tool_calls") or []
    calls = [c for c in (_from_object(f, "parameters") for f in found) if c is not None]
    return (None, calls) if calls else (text, [])


class CallSplitter:
    """Streaming with ``auto``: pass text through until a call opens, then keep the rest for ``parse``."""

    def __init__(self) -> None:
        self._buf = ""
        self.in_call = False

    def feed(self, text: str, final: bool) -> str:
        if self.in_call:
            self._buf += text
            return ""
        self._buf += text
        at = self._buf.find(OPEN)
        if at != -1:
            out, self._buf = self._buf[:at], self._buf[at:]
            self.in_call = True
            return out
        keep = 0 if final else partial_suffix(self._buf, OPEN)
        out = self._buf[: len(self._buf) - keep]
        self._buf = self._buf[len(self._buf) - keep :]
        return out

    @property
    def rest(self) -> str:
        return self._buf
