"""The rerank node of an OVMS ``graph.pbtxt`` (``RerankCalculatorOV``, as ``export_model.py
rerank_ov`` writes it): ``models_path``, ``target_device``, ``plugin_config`` (a JSON object in a
string), ``max_allowed_chunks`` (most query+chunk pairs per request) and
``max_position_embeddings`` (the pair length, below the model's own). genmesh serves the
``models_path`` folder as a sentence-transformers cross-encoder (``embeddings/cross_encoder.py``).
``render`` writes such a graph."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .ovms_graph import GraphError, nodes_options, validated

OPTIONS_TYPE = "mediapipe.RerankCalculatorOVOptions"


class RerankNodeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    models_path: str
    target_device: str | None = None
    plugin_config: dict[str, Any] | None = None
    max_allowed_chunks: int | None = Field(default=None, ge=1)
    max_position_embeddings: int | None = Field(default=None, ge=4)

    @field_validator("plugin_config", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"plugin_config is not valid JSON: {exc}") from exc
        return value


def rerank_node_options(text: str, where: str) -> RerankNodeOptions | None:
    """The options of the graph's rerank node; None for a graph without one."""
    found = nodes_options(text, where, OPTIONS_TYPE)
    if not found:
        return None
    if len(found) > 1:
        raise GraphError(f"{where}: expected one node with {OPTIONS_TYPE} node_options, found {len(found)}")
    return validated(RerankNodeOptions, found[0], where)


_GRAPH_TEMPLATE = """input_stream: "REQUEST_PAYLOAD:input"
output_stream: "RESPONSE_PAYLOAD:output"
node {{
  name: "RerankExecutor"
  input_side_packet: "RERANK_NODE_RESOURCES:rerank_servable"
  calculator: "RerankCalculatorOV"
  input_stream: "REQUEST_PAYLOAD:input"
  output_stream: "RESPONSE_PAYLOAD:output"
  node_options: {{
    [type.googleapis.com / {options_type}]: {{
{options}
    }}
  }}
}}
"""


def render(options: RerankNodeOptions) -> str:
    lines = []
    for name, value in options.model_dump(exclude_none=True).items():
        if isinstance(value, int):
            text = str(value)
        elif name == "plugin_config":
            text = "'" + json.dumps(value, separators=(",", ":")) + "'"
        else:
            text = json.dumps(str(value))
        lines.append(f"      {name}: {text},")
    return _GRAPH_TEMPLATE.format(options_type=OPTIONS_TYPE, options="\n".join(lines))
