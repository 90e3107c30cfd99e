"""The LLM node of an OVMS ``graph.pbtxt``: its ``node_options`` as typed pipeline settings.

OVMS serves an LLM as a MediaPipe graph whose ``HttpLLMCalculator`` node carries
``[type.googleapis.com / mediapipe.LLMCalculatorOptions]`` options. The options genmesh
honours are the fields of ``LLMNodeOptions`` (with speculative decoding's ``draft_models_path`` and
the ``tool_parser``, and genmesh's own ``num_assistant_tokens`` / ``assistant_confidence_threshold``,
which OVMS takes per request); the other options OVMS defines (the draft's own device and scheduler,
other parsers) are reported by ``ignored`` (the caller logs them)
rather than dropped silently, and any option OVMS does not define is an error (a typo must not
pass for a setting). ``render`` writes the graph OVMS's ``export_model.py`` writes.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import pbtxt

GRAPH_FILE = "graph.pbtxt"
M = TypeVar("M", bound=BaseModel)
OPTIONS_TYPE = "mediapipe.LLMCalculatorOptions"
# Options of OVMS's LLMCalculatorOptions that genmesh accepts but does not act on.
OVMS_ONLY_OPTIONS = frozenset(
    {
        "draft_device",
        "draft_max_num_batched_tokens",
        "draft_cache_size",
        "draft_block_size",
        "draft_max_num_seqs",
        "draft_dynamic_split_fuse",
        "draft_plugin_config",
        "draft_eagle3_mode",
        "reasoning_parser",
        "response_parser",
        "enable_tool_guided_generation",
        "max_prompt_length",
    }
)
# OVMS's servable types; genmesh serves text with continuous batching (AUTO picks it on CPU/GPU).
PipelineType = Literal["LM_CB", "AUTO"]
# OVMS's tool parsers that genmesh implements (openai/tools.py): Hermes/Qwen, Llama 3 JSON, Qwen3-Coder's XML.
ToolParser = Literal["hermes3", "llama3", "qwen3coder"]


class GraphError(ValueError):
    """A graph.pbtxt that cannot be served; the message names the file and the cause."""


class LLMNodeOptions(BaseModel):
    """``LLMCalculatorOptions`` as OVMS documents them; unset ones take the server-wide flags."""

    model_config = ConfigDict(extra="allow", strict=True)

    models_path: str
    cache_size: int | None = Field(default=None, ge=0)
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    dynamic_split_fuse: bool | None = None
    enable_prefix_caching: bool | None = None
    device: str | None = None
    plugin_config: dict[str, Any] | None = None
    best_of_limit: int | None = Field(default=None, ge=1)
    max_tokens_limit: int | None = Field(default=None, ge=1)
    pipeline_type: PipelineType | None = None
    draft_models_path: str | None = None  # relative to the graph's folder (base_path), as models_path
    num_assistant_tokens: int | None = Field(default=None, ge=1)
    assistant_confidence_threshold: float | None = Field(default=None, gt=0.0, lt=1.0)
    tool_parser: ToolParser | None = None

    @model_validator(mode="after")
    def _known(self) -> LLMNodeOptions:
        unknown = sorted(set(self.model_extra or {}) - OVMS_ONLY_OPTIONS)
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(unknown)} (not an OVMS LLMCalculatorOptions field)")
        return self

    @field_validator("plugin_config", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        if isinstance(value, str):  # a JSON object in a pbtxt string, as OVMS expects
            try:
                return json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"plugin_config is not valid JSON: {exc}") from exc
        return value

    @property
    def ignored(self) -> list[str]:
        """Options present in the graph that genmesh does not act on."""
        return sorted(self.model_extra or {})

    def settings_overrides(self) -> dict[str, Any]:
        """The per-model settings these options set (everything but ``models_path``)."""
        renamed = {"draft_models_path": "draft_model", "tool_parser": "tool_call_parser"}
        known = self.model_dump(exclude={"models_path", "pipeline_type"}, exclude_none=True)
        return {renamed.get(k, k): v for k, v in known.items() if k in type(self).model_fields}


def _options_of(node: pbtxt.Message, options_type: str) -> pbtxt.Message | None:
    for node_options in node.messages("node_options"):
        for name, value in node_options.fields:
            if name.startswith("[") and name.rstrip("]").endswith(options_type) and isinstance(value, pbtxt.Message):
                return value
    return None


def nodes_options(text: str, where: str, options_type: str) -> list[pbtxt.Message]:
    """The ``node_options`` of type ``options_type`` of every node of a graph."""
    try:
        graph = pbtxt.parse(text)
    except pbtxt.PbtxtError as exc:
        raise GraphError(f"{where}: {exc}") from exc
    return [opts for node in graph.messages("node") if (opts := _options_of(node, options_type)) is not None]


def validated(model: type[M], options: pbtxt.Message, where: str) -> M:
    """A node's options as ``model``; a GraphError naming the file and the first bad option."""
    try:
        return model.model_validate(options.to_dict())
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        raise GraphError(f"{where}: node_options {loc + ': ' if loc else ''}{first.get('msg')}") from exc


def llm_node_options(text: str, where: str = GRAPH_FILE) -> LLMNodeOptions:
    """Parse a graph and return the options of its one LLM node."""
    found = nodes_options(text, where, OPTIONS_TYPE)
    if len(found) != 1:
        raise GraphError(f"{where}: expected exactly one node with {OPTIONS_TYPE} node_options, found {len(found)}")
    return validated(LLMNodeOptions, found[0], where)


_GRAPH_TEMPLATE = """input_stream: "HTTP_REQUEST_PAYLOAD:input"
output_stream: "HTTP_RESPONSE_PAYLOAD:output"

node: {{
  name: "LLMExecutor"
  calculator: "HttpLLMCalculator"
  input_stream: "LOOPBACK:loopback"
  input_stream: "HTTP_REQUEST_PAYLOAD:input"
  input_side_packet: "LLM_NODE_RESOURCES:llm"
  output_stream: "LOOPBACK:loopback"
  output_stream: "HTTP_RESPONSE_PAYLOAD:output"
  input_stream_info: {{
    tag_index: 'LOOPBACK:0',
    back_edge: true
  }}
  node_options: {{
      [type.googleapis.com / {options_type}]: {{
{options}
      }}
  }}
  input_stream_handler {{
    input_stream_handler: "SyncSetInputStreamHandler",
    options {{
      [mediapipe.SyncSetInputStreamHandlerOptions.ext] {{
        sync_set {{
          tag_index: "LOOPBACK:0"
        }}
      }}
    }}
  }}
}}
"""


def _pbtxt_value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if name == "plugin_config":  # a JSON object in a single-quoted string, as export_model.py writes it
        return "'" + json.dumps(value, separators=(",", ":")) + "'"
    if name in ("pipeline_type", "pooling"):  # an enum value: a bare word
        return str(value)
    return json.dumps(str(value))


def render(options: LLMNodeOptions) -> str:
    """The graph.pbtxt of one LLM node with these options (the set ones only)."""
    values = options.model_dump(exclude_none=True, exclude=set(options.model_extra or {}))
    lines = [f"          {name}: {_pbtxt_value(name, value)}," for name, value in values.items()]
    return _GRAPH_TEMPLATE.format(options_type=OPTIONS_TYPE, options="\n".join(lines))


class ServableNodeOptions(BaseModel):
    """What every OVMS servable node (embeddings, rerank) names: its folder, device and plugin config."""

    model_config = ConfigDict(extra="forbid", strict=True)

    models_path: str
    target_device: str | None = None
    plugin_config: dict[str, Any] | None = None

    @field_validator("plugin_config", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"plugin_config is not valid JSON: {exc}") from exc
        return value


_SERVABLE_GRAPH_TEMPLATE = """input_stream: "REQUEST_PAYLOAD:input"
output_stream: "RESPONSE_PAYLOAD:output"
node {{
  name: "{kind}Executor"
  input_side_packet: "{resources}_NODE_RESOURCES:{servable}_servable"
  calculator: "{kind}CalculatorOV"
  input_stream: "REQUEST_PAYLOAD:input"
  output_stream: "RESPONSE_PAYLOAD:output"
  node_options: {{
    [type.googleapis.com / mediapipe.{kind}CalculatorOVOptions]: {{
{options}
    }}
  }}
}}
"""


def render_servable(kind: Literal["Embeddings", "Rerank"], options: ServableNodeOptions) -> str:
    """The graph.pbtxt of one ``{kind}CalculatorOV`` node with these options (the set ones only),
    as OVMS's ``export_model.py`` writes it."""
    values = options.model_dump(exclude_none=True)
    lines = [f"      {name}: {_pbtxt_value(name, value)}," for name, value in values.items()]
    return _SERVABLE_GRAPH_TEMPLATE.format(
        kind=kind, resources=kind.upper(), servable=kind.lower(), options="\n".join(lines)
    )


def one_node_options(text: str, where: str, options_type: str, model: type[M]) -> M | None:
    """The options of the graph's one node of ``options_type``, validated as ``model``; None for a graph without one."""
    found = nodes_options(text, where, options_type)
    if not found:
        return None
    if len(found) > 1:
        raise GraphError(f"{where}: expected one node with {options_type} node_options, found {len(found)}")
    return validated(model, found[0], where)
