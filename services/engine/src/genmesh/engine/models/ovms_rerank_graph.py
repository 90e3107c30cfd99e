"""The rerank node of an OVMS ``graph.pbtxt`` (``RerankCalculatorOV``, as ``export_model.py
rerank_ov`` writes it): ``models_path``, ``target_device``, ``plugin_config`` (a JSON object in a
string), ``max_allowed_chunks`` (most query+chunk pairs per request) and
``max_position_embeddings`` (the pair length, below the model's own). genmesh serves the
``models_path`` folder as a sentence-transformers cross-encoder (``embeddings/cross_encoder.py``).
``render`` writes such a graph."""

from __future__ import annotations

from pydantic import Field

from .ovms_graph import ServableNodeOptions, one_node_options, render_servable

OPTIONS_TYPE = "mediapipe.RerankCalculatorOVOptions"


class RerankNodeOptions(ServableNodeOptions):
    max_allowed_chunks: int | None = Field(default=None, ge=1)
    max_position_embeddings: int | None = Field(default=None, ge=4)


def rerank_node_options(text: str, where: str) -> RerankNodeOptions | None:
    """The options of the graph's rerank node; None for a graph without one."""
    return one_node_options(text, where, OPTIONS_TYPE, RerankNodeOptions)


def render(options: RerankNodeOptions) -> str:
    return render_servable("Rerank", options)
