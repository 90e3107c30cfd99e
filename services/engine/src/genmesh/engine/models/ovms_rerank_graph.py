"""The rerank node of an OVMS ``graph.pbtxt`` (``RerankCalculatorOV``, as ``export_model.py
rerank_ov`` writes it): ``models_path``, ``target_device``, ``plugin_config`` (a JSON object in a
string), ``max_allowed_chunks`` (most query+chunk pairs per request) and
``max_position_embeddings`` (the pair length, below the model's own). genmesh serves the
``models_path`` folder as a sentence-transformers cross-encoder (``embeddings/cross_encoder.py``).
``render`` writes such a graph."""

from __future__ import annotations

import json

from pydantic import Field

from .ovms_graph import ServableNodeOptions, one_node_options

OPTIONS_TYPE = "mediapipe.RerankCalculatorOVOptions"


class RerankNodeOptions(ServableNodeOptions):
    max_allowed_chunks: int | None = Field(default=None, ge=1)
    max_position_embeddings: int | None = Field(default=None, ge=4)


def rerank_node_options(text: str, where: str) -> RerankNodeOptions | None:
    """The options of the graph's rerank node; None for a graph without one."""
    return one_node_options(text, where, OPTIONS_TYPE, RerankNodeOptions)


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
