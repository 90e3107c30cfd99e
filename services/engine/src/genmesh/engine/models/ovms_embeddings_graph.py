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
from typing import Literal

from .ovms_graph import ServableNodeOptions, one_node_options

OPTIONS_TYPE = "mediapipe.EmbeddingsCalculatorOVOptions"
OVMS_POOLING = {"CLS": "cls", "LAST": "last", "MEAN": "mean"}


class EmbeddingsNodeOptions(ServableNodeOptions):
    normalize_embeddings: bool | None = None
    pooling: Literal["CLS", "LAST", "MEAN"] | None = None
    truncate: bool = False


def embeddings_node_options(text: str, where: str) -> EmbeddingsNodeOptions | None:
    """The options of the graph's embeddings node; None for a graph without one (an LLM graph)."""
    return one_node_options(text, where, OPTIONS_TYPE, EmbeddingsNodeOptions)


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
