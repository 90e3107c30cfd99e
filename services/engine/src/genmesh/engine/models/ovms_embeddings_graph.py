"""The embeddings node of an OVMS ``graph.pbtxt`` (``EmbeddingsCalculatorOV``): its options.

OVMS serves an embedding model as a MediaPipe graph whose node carries
``[type.googleapis.com / mediapipe.EmbeddingsCalculatorOVOptions]``: ``models_path``,
``target_device``, ``plugin_config`` (a JSON object in a string), ``normalize_embeddings``,
``pooling`` (``CLS``, ``LAST`` or ``MEAN``) and ``truncate`` (cut inputs longer than the model
takes instead of refusing them). Unlike OVMS, whose ``pooling`` defaults to ``CLS``, a graph that
names no pooling (or no normalisation) gets the checkpoint's own sentence-transformers
configuration. ``render`` writes such a graph (genmesh-export's ``embeddings_ov`` task)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from .ovms_graph import GraphError, nodes_options, validated

OPTIONS_TYPE = "mediapipe.EmbeddingsCalculatorOVOptions"
OVMS_POOLING = {"CLS": "cls", "LAST": "last", "MEAN": "mean"}


class EmbeddingsNodeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    models_path: str
    target_device: str | None = None
    plugin_config: dict[str, Any] | None = None
    normalize_embeddings: bool | None = None
    pooling: Literal["CLS", "LAST", "MEAN"] | None = None
    truncate: bool = False

    @field_validator("plugin_config", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"plugin_config is not valid JSON: {exc}") from exc
        return value


def embeddings_node_options(text: str, where: str) -> EmbeddingsNodeOptions | None:
    """The options of the graph's embeddings node; None for a graph without one (an LLM graph)."""
    found = nodes_options(text, where, OPTIONS_TYPE)
    if not found:
        return None
    if len(found) > 1:
        raise GraphError(f"{where}: expected one node with {OPTIONS_TYPE} node_options, found {len(found)}")
    return validated(EmbeddingsNodeOptions, found[0], where)


_GRAPH_TEMPLATE = """input_stream: "REQUEST_PAYLOAD:input"
output_stream: "RESPONSE_PAYLOAD:output"
node {{
  name: "EmbeddingsExecutor"
  input_side_packet: "EMBEDDINGS_NODE_RESOURCES:embeddings_servable"
  calculator: "EmbeddingsCalculatorOV"
  input_stream: "REQUEST_PAYLOAD:input"
  output_stream: "RESPONSE_PAYLOAD:output"
  node_options: {{
    [type.googleapis.com / {options_type}]: {{
{options}
    }}
  }}
}}
"""


def render(options: EmbeddingsNodeOptions) -> str:
    lines = []
    for name, value in options.model_dump(exclude_none=True).items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif name == "pooling":
            text = str(value)
        elif name == "plugin_config":
            text = "'" + json.dumps(value, separators=(",", ":")) + "'"
        else:
            text = json.dumps(str(value))
        lines.append(f"      {name}: {text},")
    return _GRAPH_TEMPLATE.format(options_type=OPTIONS_TYPE, options="\n".join(lines))
